"""Short runs: the probes sample a young run densely (every other step for its first steps, whatever
their budget), and an epoch-long sawtooth of graph-carrying tensors is judged on one complete epoch
once the next one is seen filling the same way."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import torch

from memleak.detect import lifetimes
from memleak.probes import ProbeContext
from memleak.probes.budget import YOUNG_DENSE, YOUNG_GAP, young_gap
from memleak.probes.modules import ModuleProbe
from memleak.probes.tensors import TensorProbe
from memleak.records import HolderRow


def _detail_steps(probe, model, flag: str, detail_seconds: float, steps: int = 40) -> list[int]:
    """The steps a probe samples in detail when a detail step takes `detail_seconds` against plain
    steps of a second (a costly walk: its budget alone would space them widely)."""
    seen = []
    try:
        for step in range(steps):
            probe.step_begin(step)
            model(torch.ones(2, 4))
            detail = bool(getattr(probe, flag))
            if detail:
                seen.append(step)
            probe.sample(step, detail_seconds if detail else 1.0)
    finally:
        probe.stop()
    return seen


def test_young_gap_is_dense_while_young_and_cheap_only():
    assert young_gap(1, 0.01) == YOUNG_GAP
    assert young_gap(YOUNG_DENSE, 0.01) is None  # past the young steps: the budget's pace
    assert young_gap(1, 60.0) is None  # a detail step of a minute keeps its budget


def test_the_module_probe_samples_a_young_run_every_other_step():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    probe = ModuleProbe()
    probe.start(ProbeContext(torch.device("cpu"), "full", weakref.ref(model), options={"modules_budget": 0.02}))
    seen = _detail_steps(probe, model, "detail", 1.19)
    young = [s for s in seen if s < YOUNG_DENSE]
    assert young == list(range(1, YOUNG_DENSE, YOUNG_GAP))  # 8 samples where the budget gives 2
    later = np.diff([s for s in seen if s >= young[-1]])
    assert (later >= 8).all()  # then the budget's pace again (one in 10)


def test_the_tensor_probe_samples_a_young_run_every_other_step():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    probe = TensorProbe()
    probe.start(ProbeContext(torch.device("cpu"), "full", weakref.ref(model), options={"deep_budget": 0.1}))
    seen = _detail_steps(probe, model, "_mode", 1.4)
    young = [s for s in seen if s < YOUNG_DENSE]
    assert len(young) >= 7 and (np.diff(young) == YOUNG_GAP).all()
    assert (np.diff([s for s in seen if s >= young[-1]]) >= 4).all()  # then 0.4 s at 10 %: one in 4+


class _NoSeries:
    def __init__(self, optimizer_every: int = 1, steps: int = 40):
        import pandas as pd

        self.steps = pd.DataFrame({"step": range(steps), "optimizer_steps": [s // optimizer_every for s in range(steps)]})

    def memory_column(self):
        return None


def _rows(counts, graphs=True):
    return [None if c == 0 else HolderRow("epoch_loss", "local", count=c, bytes=1024 * c,
                                          grad=c if graphs else 0, nodes=6 * c if graphs else 0)
            for c in counts]


@pytest.mark.parametrize("counts, graphs, leak", [
    ([2, 6, 10, 14, 0, 2, 6], True, True),  # one epoch, and the next filling with graphs: a 15-step run
    ([2, 6, 10, 14, 0, 2, 6, 10, 14, 0], True, True),  # two epochs, as before
    ([2, 6, 10, 14, 0, 2], True, False),  # the next epoch seen on two samples only
    ([2, 6, 10, 14, 0, 2, 6], False, False),  # detached outputs kept for an epoch: bounded
    ([2, 6, 10, 14, 0, 2, 2], True, False),  # the next one does not fill
])
def test_one_epoch_of_graphs_and_the_next_filling_is_a_retained_graph(counts, graphs, leak):
    steps = list(range(1, 2 * len(counts), 2))
    f = lifetimes._graph_teeth(_NoSeries(), "epoch_loss", steps, _rows(counts, graphs))
    assert (f is not None) == leak
    if leak:
        assert f.kind.value == "retained_graph" and f.location == "epoch_loss"


def test_a_gradient_accumulation_windows_summed_losses_are_no_epoch_of_graphs():
    """Losses summed over the micro-batches of one optimizer step, one backward each (the forum's
    "sum the losses, backward once"): the holder fills and empties with the optimizer's steps,
    bounded by the window, not by an epoch."""
    counts = [2, 6, 10, 14, 0, 2, 6, 10, 14, 0]  # emptied every 10 steps (sampled every other step)
    steps = list(range(1, 2 * len(counts), 2))
    accumulation = lifetimes._graph_teeth(_NoSeries(optimizer_every=10), "accum_loss", steps, _rows(counts))
    assert accumulation is None
    every_step = lifetimes._graph_teeth(_NoSeries(optimizer_every=1), "accum_loss", steps, _rows(counts))
    assert every_step is not None and every_step.leak  # an optimizer step each step: an epoch's graphs
    other = lifetimes._graph_teeth(_NoSeries(optimizer_every=4), "accum_loss", steps, _rows(counts))
    assert other is not None  # a window that is not the holder's period explains nothing
