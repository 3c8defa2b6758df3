"""Small training loops shared by the tests: deterministic, CPU-sized, and explicit about their leaks."""
from __future__ import annotations

import torch
from torch import nn


def make_model(seed: int = 0, width: int = 64) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, *, keep: list | None = None,
          leak_bytes: int = 0, tracker=None, width: int = 64) -> list[float]:
    """Run `steps` SGD steps; with `keep` and `leak_bytes`, append a fresh tensor of that size each step."""
    losses = []
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, width, generator=gen)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if keep is not None and leak_bytes:
            keep.append(torch.ones(leak_bytes // 4))
        if tracker is not None:
            tracker.step()
    return losses


def import_error_without(module: str, blocked: tuple[str, ...]) -> str:
    """The message of the error that importing `module` raises, in a fresh interpreter in
    which the packages `blocked` cannot be imported. Fails unless it is a MemleakError."""
    import subprocess
    import sys
    code = (f"import sys\n"
            f"for m in {blocked!r}: sys.modules[m] = None\n"
            f"try:\n"
            f"    import {module}\n"
            f"except ImportError as e:\n"
            f"    import memleak\n"
            f"    assert isinstance(e, memleak.MemleakError), type(e)\n"
            f"    print(e)\n"
            f"else:\n"
            f"    raise SystemExit('the import succeeded')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
