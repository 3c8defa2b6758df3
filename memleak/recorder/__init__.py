"""Recording a run: `memleak.track` and `memleak.watch`, and the `Tracker` behind them.

The tracker marks iteration boundaries, samples every probe at each one, appends a step
record to the run, and undoes everything it installed on exit, also when the loop raises.
It holds the model and optimizer through weak references only.
"""

from .runinfo import run_file_path
from .tracker import Tracker, track
from .watch import watch

__all__ = ["Tracker", "run_file_path", "track", "watch"]
