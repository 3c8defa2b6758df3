"""Small training loops shared by the tests: deterministic, CPU-sized, and explicit about their leaks."""
from __future__ import annotations

import torch
from torch import nn


def needs(*packages: str) -> list:
    """Marks for a test module that needs optional packages (a training framework): skipped when
    one is missing, found without importing it, and the tests of every module that needs the same
    first package kept on one xdist worker (the group is its name). Importing transformers' Trainer
    or Lightning costs seconds; the modules import them inside their tests, so only the worker that
    runs them pays."""
    from importlib.util import find_spec

    import pytest

    missing = [p for p in packages if find_spec(p) is None]
    return [pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}"),
            pytest.mark.xdist_group(packages[0])]


def make_model(seed: int = 0, width: int = 64) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def model_and_optimizer(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small MLP (64 -> 128 -> 8) and its SGD optimizer."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


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


class CliResult:
    """What a `memleak ...` command left behind: its exit status and what it printed."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def memleak_in_process(*args, cwd=None) -> CliResult:
    """Run `memleak ARGS` through the same `main()` the console script calls, in this process:
    the tests that assert what the command prints and returns need no fresh interpreter, whose
    torch import costs seconds. An exception other than the command's own exit fails the test,
    as a traceback would. The end-to-end subprocess runs live in test_cli.py and test_zero_code.py."""
    import contextlib
    import io
    import os
    import warnings

    from memleak.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as PYTHONWARNINGS=ignore does for the subprocess runs
            try:
                status = main([str(a) for a in args])
            except SystemExit as e:  # argparse's usage errors and --help/--version
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
    return CliResult(status, out.getvalue(), err.getvalue())


class FakeClock:
    """A `time` stand-in for the time budgets (probes/budget.py): it moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now
