"""`memleak.track` around a loop that never calls `tracker.step()` and gives no optimizer: the
model's backward passes, or with none its calls, end the iterations, as under `memleak run`;
with nothing to mark them, one clear line says what to do."""
from __future__ import annotations

import logging

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

import memleak
from memleak.recorder.boundaries import GRACE

STEPS = 24


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def test_an_inference_loop_ends_an_iteration_at_each_call_and_its_kept_outputs_are_named():
    model = _model().eval()
    preds = []
    with memleak.track(model, level="full") as tracker:
        for _ in range(STEPS):
            preds.append(model(torch.randn(32, 16)).softmax(-1))  # no torch.no_grad(): graphs kept
    assert tracker.iterations == STEPS - GRACE  # the first iteration spans the first calls
    report = tracker.report()
    assert report.leak
    assert report.suspects[0].location == "preds"
    assert "each call of the model" in str(report)


def test_a_training_loop_with_no_optimizer_given_ends_an_iteration_at_each_backward_pass():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, level="counters") as tracker:  # the optimizer not given
        for _ in range(STEPS):
            with torch.no_grad():
                model(torch.randn(4, 16))  # an evaluation call inside the iteration: no extra one
            loss = model(torch.randn(32, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    # the first three calls and backward passes end none (the first iteration ends at the second's
    # training call); from then on each backward pass ends one, recorded at the next call
    assert tracker.iterations == STEPS
    assert "each backward pass" in str(tracker.report())


def test_a_loop_that_calls_tracker_step_is_not_split_and_the_model_hooks_come_off_at_its_first_call():
    model = _model()
    before = (len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks))
    with memleak.track(model, level="counters") as tracker:
        assert len(module_hooks._global_forward_hooks) == before[1] + 1  # on until the loop says
        for _ in range(STEPS):
            with torch.no_grad():
                model(torch.randn(8, 16))
            tracker.step()
            assert (len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks)) == before
    assert tracker.iterations == STEPS
    assert "tracker.step()" in str(tracker.report())


def test_a_block_with_nothing_to_mark_iterations_says_what_to_do(caplog):
    model = _model()
    with caplog.at_level(logging.WARNING, logger="memleak"), memleak.track() as tracker:
        for _ in range(5):
            model(torch.randn(8, 16))
    assert tracker.iterations == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "memleak"]
    assert len(lines) == 1 and "no iteration was recorded: call tracker.step()" in lines[0]
    verdict = str(tracker.report()).splitlines()
    assert any(line.startswith("verdict: INCONCLUSIVE: no iteration was recorded") for line in verdict)
