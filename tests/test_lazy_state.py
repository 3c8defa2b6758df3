"""Optimizer state made lazily, as parameters get their first update (a task's head trained when
its task is first drawn), grows memory step after step until every parameter has it: bounded, no
leak. State that grows per parameter, or parameters added to the optimizer, are not that."""
import types

import numpy as np
import torch
from torch import nn

import memleak
from memleak.detect.growth import Growth
from memleak.detect.lazy_state import created_lazily
from memleak.schema import Shape

TASKS = 24
KIB = 1024


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(64, 256)
        self.heads = nn.ModuleList(nn.Linear(256, 256) for _ in range(TASKS))

    def forward(self, x, task):
        return self.heads[task](torch.relu(self.trunk(x)))


def test_a_head_per_task_trained_first_late_is_no_leak():
    torch.manual_seed(0)
    model = Heads()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for step in range(30):
            loss = model(torch.randn(32, 64), step % TASKS).pow(2).mean()
            opt.zero_grad()  # set_to_none: the heads not drawn have no gradient, Adam skips them
            loss.backward()
            opt.step()
            tracker.step()
    report = tracker.report()
    assert report.verdict.value != "leak", str(report)
    if report.growth.column == "heap_bytes":  # a CPU run: the heap grew with the state
        assert "optimizer's state grew" in " ".join(report.growth.evidence), str(report)


def _growth() -> Growth:
    return Growth("heap_bytes", Shape.LINEAR, True, 0, 256 * KIB, 0.0, 1e-9, 0.9, 30, None, None, None, ("grows",))


def _run(*cats):
    recs = [types.SimpleNamespace(step=s, categories=c) for s, c in cats]
    return types.SimpleNamespace(module_records=recs)


def _cats(state, stateful, params=TASKS * 256 * KIB):
    return {"optimizer_state": state, "stateful_params": stateful, "optimizer_params": params}


def test_only_state_made_for_more_parameters_at_the_same_bytes_each_explains_growth():
    x = np.arange(30, dtype=float)
    y = 1e8 + 256 * KIB * x
    rise = 256 * KIB * 20
    lazy = _run((5, _cats(2 * 256 * KIB, 256 * KIB)), (25, _cats(2 * 256 * KIB + rise, 256 * KIB + rise // 2)))
    g = created_lazily(lazy, _growth(), x, y)
    assert not g.leak and g.shape == Shape.BOUNDED and g.confidence < 0.5
    # the same rise in state, but for parameters that had it already: a history kept in state[p]
    per_param = _run((5, _cats(2 * 256 * KIB, 256 * KIB)), (25, _cats(2 * 256 * KIB + rise, 256 * KIB)))
    assert created_lazily(per_param, _growth(), x, y).leak
    # parameters added to the optimizer each step: its state grows without bound
    added = _run((5, _cats(2 * 256 * KIB, 256 * KIB)),
                 (25, _cats(2 * 256 * KIB + rise, 256 * KIB + rise // 2, params=TASKS * 256 * KIB + rise)))
    assert created_lazily(added, _growth(), x, y).leak
    # state that explains only a fraction of the rise leaves a leak
    small = _run((5, _cats(2 * 256 * KIB, 256 * KIB)), (25, _cats(4 * 256 * KIB, 2 * 256 * KIB)))
    assert created_lazily(small, _growth(), x, y).leak
