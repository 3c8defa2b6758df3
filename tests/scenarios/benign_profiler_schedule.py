"""``torch.profiler`` with a schedule, as its documentation recommends for long jobs: it waits one
step, warms up one, records three, hands the trace to ``on_trace_ready`` and stops recording
(``repeat=1``). Memory steps up while it records, then stays: no leak, and the profiler is no
suspect.

Real pattern: the PyTorch profiler recipe's "Using profiler to analyze long-running jobs"
(https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html), as used in FreyrS/dMaSIF
https://github.com/FreyrS/dMaSIF/issues/25 (``schedule(wait=1, warmup=20, active=1)``).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(72)
    model = MLP(hidden=128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    traces = []
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
        on_trace_ready=lambda p: traces.append(len(p.events())),  # a summary, not the events
    ) as prof:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                tracker.step()
