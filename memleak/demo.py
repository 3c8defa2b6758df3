"""`memleak demo`: a small training loop with a planted leak, tracked and reported.

The leak is the most common one in the wild: predictions kept for later
metrics without `.detach()`, so every step's autograd graph stays alive.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .schema import DEFAULT_LEVEL


class TinyClassifier(nn.Module):
    def __init__(self, width: int = 256, classes: int = 1000):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU())
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def leaky_training(steps: int, device: torch.device, tracker_options: dict):
    """Train TinyClassifier for `steps` steps inside memleak.track and return the tracker."""
    import memleak

    torch.manual_seed(0)
    model = TinyClassifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    all_logits = []  # the planted leak: should hold logits.detach()
    with memleak.track(model, optimizer=optimizer, **tracker_options) as tracker:
        for _ in range(steps):
            x = torch.randn(128, 256, device=device)
            y = torch.randint(0, 1000, (128,), device=device)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()  # ends the iteration for the tracker
            all_logits.append(logits)
    return tracker


def run_demo(out: str | Path = "memleak-demo", steps: int = 60, device: str | None = None, level: str = DEFAULT_LEVEL):
    from .probes import parse_device

    dev = parse_device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(out)
    own = _earlier_demo_run(out)  # replaced: a demo never makes a folder of demo runs
    tracker = leaky_training(steps, dev, {"out": own or out, "level": level, "overwrite": own is not None})
    report = tracker.report()
    report.save(out)
    return report


def _earlier_demo_run(out: Path) -> Path | None:
    """The run file in `out` that an earlier demo recorded (its model is the demo's), if any. A
    demo replaces only that one: another run or file in `out` makes it write beside them."""
    from .io.runfiles import read_header, run_number
    from .recorder.runinfo import run_file_path

    base = run_file_path(out)
    for f in sorted(base.parent.glob(f"{base.stem}*{base.suffix}"), key=run_number):
        header = read_header(f)
        if header is not None and header.get("model") == TinyClassifier.__name__:
            return f
    return None
