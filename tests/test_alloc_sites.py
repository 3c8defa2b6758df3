"""Growth no holder explains is named by the user's line that allocates it (tracemalloc over a few
steps once the host heap rose: probes/alloc_sites.py, detect/alloc_sites.py)."""
from __future__ import annotations

import dataclasses
import inspect
import tracemalloc

import matplotlib
import numpy as np
import pytest
import torch

import memleak
from memleak.probes import alloc_sites
from tests.helpers import model_and_optimizer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _plots_every_step(steps: int, level: str = "full", fail_at: int | None = None) -> tuple[memleak.Tracker, int]:
    """A loop that opens a pyplot figure of 20 000 points each step and never closes it (pyplot
    keeps every open figure), and the line that does."""
    model, opt = model_and_optimizer()
    line = 0
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        for step in range(steps):
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
            plt.figure(), plt.plot(np.random.rand(20_000))
            line = inspect.currentframe().f_lineno - 1
            if step == fail_at:
                raise RuntimeError("the loop failed")
    return tracker, line


def test_figures_pyplot_keeps_are_named_by_the_line_that_opens_them():
    try:
        tracker, line = _plots_every_step(60)
    finally:
        plt.close("all")
    assert not tracemalloc.is_tracing()  # stopped once its window ended
    top = tracker.report().suspects[0]
    assert top.kind == "python_objects"
    assert top.location == f"test_alloc_sites.py:{line}"
    assert any("inside matplotlib" in e and "tracemalloc over steps" in e for e in top.evidence)
    assert "plt.close(fig)" in top.fix


def test_tracing_stops_when_the_loop_raises_inside_its_window(monkeypatch):
    start = alloc_sites.AllocSitesProbe.start

    def leaking_from_the_start(self, ctx):  # as if the live check took the heap for a leak at once
        return start(self, dataclasses.replace(ctx, host_leaking=lambda: True))

    monkeypatch.setattr(alloc_sites.AllocSitesProbe, "start", leaking_from_the_start)
    try:
        with pytest.raises(RuntimeError, match="the loop failed"):
            _plots_every_step(60, fail_at=alloc_sites.FIRST_STEP + 2)  # the window runs steps 17 to 21
    finally:
        plt.close("all")
    assert not tracemalloc.is_tracing()


def test_a_program_that_traces_itself_is_left_tracing():
    tracemalloc.start(1)
    try:
        model, opt = model_and_optimizer()
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for _ in range(3):
                model(torch.randn(8, 64)).sum().backward()
                opt.step()
        assert tracemalloc.is_tracing()
        assert "sites" not in tracker.run().meta["probes"]
    finally:
        tracemalloc.stop()


def test_a_loop_whose_heap_stays_flat_is_never_traced(monkeypatch):
    started = []
    monkeypatch.setattr(alloc_sites.AllocSitesProbe, "_begin", lambda self, step: started.append(step))
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="auto"):
        for _ in range(60):
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
    assert started == []

