"""Level auto's young steps begin again where the iterations' boundary changes from a model call
to a stronger one: a decode loop with no optimizer calls the model once a token, and until its
first tracker.step() each call ended a step, so the young steps were spent inside one request."""
from array import array

import pytest
import torch
from torch import nn

import memleak
from memleak.recorder import escalation
from memleak.recorder.escalation import AutoLevel
from memleak.schema import DetailReason


def _steps(auto: AutoLevel, first: int, last: int) -> list[tuple[int, bool | None, DetailReason]]:
    changes = []
    for step in range(first, last):
        series = {"step": array("d", range(step + 1)), "heap_bytes": array("d", [1e8] * (step + 1))}
        change = auto.after(step, 0.01, 0.01 * (step + 1), series)
        if change is not None:
            changes.append((step + 1, *change))
    return changes


def test_a_restart_opens_young_steps_from_the_next_step():
    auto = AutoLevel()
    auto.begin()
    _steps(auto, 0, 40)  # past the start window
    assert not auto.on
    auto.restart(40)
    changes = _steps(auto, 40, 41)
    assert changes == [(41, True, DetailReason.RESTART)]
    assert auto.young and auto.until == 41 + escalation.YOUNG_STEPS
    # the young steps run their whole length (no probes: none ends them early), then counters
    assert _steps(auto, 41, 41 + escalation.YOUNG_STEPS) == [(41 + escalation.YOUNG_STEPS, False, DetailReason.WINDOW_END)]


def test_a_boundary_that_changes_in_the_first_steps_restarts_nothing():
    auto = AutoLevel()
    auto.begin()
    auto.restart(escalation.RESTART_MIN - 1)
    assert all(why != DetailReason.RESTART for _, _, why in _steps(auto, 0, 40))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.head = nn.Linear(32, 64)

    def forward(self, tokens):
        return self.head(self.embed(tokens).mean(0))


def test_a_decode_loop_gets_its_young_steps_after_its_first_request():
    model = Decoder()
    kept = []
    with torch.no_grad(), memleak.track(model) as tracker:
        for _ in range(30):
            tokens = torch.randint(0, 64, (1,))
            for _ in range(24):  # a model call per token: steps end at each until tracker.step() is seen
                tokens = torch.cat([tokens, model(tokens).argmax().reshape(1)])
            kept.append(torch.randn(2048))  # what each request leaves behind
            tracker.step()
    run = tracker.run()
    called = next(e["step"] for e in run.events if e["event"] == "boundary" and e["kind"] == "call")
    assert called >= escalation.RESTART_MIN  # the first request's model calls ended steps until then
    spans = run.detail_spans()
    restarts = [a for a, b, level, why in spans if why == "restart"]
    assert restarts == [called + 1], spans
    assert f"{called + 1}-" in str(tracker.report()) and "(restart)" in str(tracker.report())


def test_the_parts_of_a_first_iteration_cut_at_each_model_call_are_not_steps_of_the_trend():
    # a server calls the model 64 times a request batch: until its first tracker.step(), each call
    # ended a step with 1/64 of a batch's growth, and 60 such rows flattened the fitted slope
    from memleak.detect.growth import analyze_growth
    from memleak.io import run_from_records
    from memleak.run import first_iteration_end

    per_batch = 256 << 10
    records = [{"type": "header", "schema": 1, "device": "cpu", "level": "full", "host_memory_bytes": 32 << 30},
               {"type": "event", "event": "boundary", "kind": "forward", "step": 0},
               {"type": "event", "event": "boundary", "kind": "call", "step": 60}]
    heap = 64 << 20
    for step in range(90):
        heap += per_batch // 64 if step < 60 else per_batch
        records.append({"type": "step", "step": step, "time": step * 0.01, "duration": 0.01, "heap_bytes": heap})
    run = run_from_records(records)
    assert first_iteration_end(run) == 60
    g = analyze_growth(run, "heap_bytes")
    assert g.leak and g.slope == pytest.approx(per_batch, rel=0.05) and g.warmup_steps >= 60
    records[2] = {"type": "event", "event": "boundary", "kind": "optimizer", "step": 60}  # another kind: real steps
    assert first_iteration_end(run_from_records(records)) == 0
