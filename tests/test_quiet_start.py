"""Level auto's young steps end early on a run where nothing survives or grows (`QUIET_AT`), and
last their full length where anything does."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import memleak
from memleak.detect.thresholds import MIN_DATA_BPS
from memleak.probes import Probe
from memleak.probes.holder_stats import compare_sizes
from memleak.recorder import escalation
from memleak.recorder.escalation import AutoLevel
from memleak.schema import DetailReason
from tests.helpers import make_model
from tests.test_auto_level import _series


def _loop(steps: int, step_fn) -> memleak.Report:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt) as tracker:
        for _ in range(steps):
            loss = model(torch.randn(8, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_fn(model, loss)
            tracker.step()
    return tracker.report()


def test_a_clean_loop_pays_for_eight_young_steps_not_thirty_two():
    report = _loop(40, lambda model, loss: None)
    spans = report.run.detail_spans()
    q = escalation.QUIET_AT
    assert spans == [(0, q - 1, "full", "start"), (q, 39, "counters", "quiet")], spans
    checks, nxt = [], math.ceil(escalation.FIRST_CHECK_RATIO * q)  # then walks at the ends of steps CHECK_RATIO apart
    while nxt <= 40:
        checks.append(nxt - 1)
        nxt = math.ceil(escalation.CHECK_RATIO * nxt)
    assert report.run.check_steps() == checks == [11, 23]
    assert report.verdict.value == "clean", str(report)
    assert f"full detail on steps 0-{q - 1} (start)" in str(report)
    assert f"the young steps ended at step {q}: nothing survived or grew in them" in " ".join(str(report).split())


class _Cache:
    def __init__(self):
        self.kept = []
        self.buf = torch.zeros(0)
        self.history: list[float] = []


def _keep(c, model, loss):
    c.kept.append(loss)


def _rebuild(c, model, loss):  # each step's cat frees the last one: nothing survives, but the holder grows
    c.buf = torch.cat([c.buf, loss.detach()[None]])


def _log(c, model, loss):  # faster than a detector names Python data (MIN_DATA_BPS)
    c.history.extend([str(loss.item()) * 10 for _ in range(50)])


def _grow_buffer(c, model, loss):  # a model's own buffer, rebuilt larger
    old = getattr(model, "seen", torch.zeros(0))
    model.register_buffer("seen", torch.cat([old, loss.detach()[None]]))


def _add_parameter(c, model, loss):  # a model that owns more tensors every step
    model.register_parameter(f"extra{len(list(model.parameters()))}", torch.nn.Parameter(torch.zeros(4)))


@pytest.mark.parametrize(
    "store",
    [_keep, _rebuild, _log, _grow_buffer, _add_parameter],
    ids=["survivors", "rebuilt_larger", "python_data", "model_buffer", "model_parameters"],
)
def test_the_young_steps_go_on_while_anything_survives_or_grows(store):
    cache = _Cache()
    spans = _loop(40, lambda model, loss: store(cache, model, loss)).run.detail_spans()
    assert spans[0] == (0, escalation.YOUNG_STEPS - 1, "full", "start"), spans


class _Probe(Probe):
    def __init__(self, quiet: bool):
        self._quiet = quiet

    def quiet(self, min_data_bps: float) -> bool:
        return self._quiet


def _first_change(probes, heap) -> tuple:
    auto = AutoLevel()
    auto.begin()
    for step in range(len(heap)):
        change = auto.after(step, 0.01, 0.01 * step, _series(heap[: step + 1]), probes)
        if change is not None:
            return (step + 1, *change)
    return ()


def test_every_probe_must_be_quiet_and_the_screen_see_no_rise():
    rng = np.random.default_rng(0)
    flat = list(1e8 + rng.integers(-4096, 4096, size=60).astype(float))
    rising = [1e8 + 50_000 * i for i in range(60)]
    young_end = (escalation.YOUNG_STEPS, False, DetailReason.WINDOW_END)
    assert _first_change([_Probe(True), _Probe(True)], flat) == (escalation.QUIET_AT, False, DetailReason.QUIET)
    assert _first_change([_Probe(True), _Probe(False)], flat) == young_end
    assert _first_change([_Probe(True)], rising)[0] == escalation.YOUNG_STEPS  # then a growth window
    assert _first_change([], flat) == young_end  # no probes asked: the young steps run their length


def test_the_tensor_probe_is_quiet_only_after_a_few_deep_steps():
    from memleak.probes.tensors import QUIET_CHECKS, TensorProbe

    probe = TensorProbe()
    probe.checks, probe.seen, probe.data_bps = QUIET_CHECKS - 1, False, 0.0
    assert not probe.quiet(MIN_DATA_BPS)
    probe.checks = QUIET_CHECKS
    assert probe.quiet(MIN_DATA_BPS)
    probe.data_bps = MIN_DATA_BPS
    assert not probe.quiet(MIN_DATA_BPS)
    probe.data_bps, probe.seen = 0.0, True
    assert not probe.quiet(MIN_DATA_BPS)


def test_a_holder_grew_when_it_holds_more_tensors_bytes_or_nodes_in_the_later_walk():
    before = {"a": (1, 100, 5, 0), "data": (0, 0, 0, 1000)}
    assert compare_sizes(before, dict(before)) == (False, 0)
    # smaller, or only in one walk
    assert compare_sizes(before, {"a": (1, 90, 5, 0), "new": (9, 9000, 9, 9000)}) == (False, 0)
    assert compare_sizes(before, {"a": (2, 100, 5, 0)})[0]  # more tensors
    assert compare_sizes(before, {"a": (1, 101, 5, 0)})[0]  # more bytes
    assert compare_sizes(before, {"a": (1, 100, 6, 0)})[0]  # a longer graph
    assert compare_sizes(before, {"data": (0, 0, 0, 5000)}) == (False, 4000)  # plain data: its gain


def test_a_loop_that_logs_a_few_numbers_a_step_still_ends_its_young_steps_early():
    history: list[float] = []
    spans = _loop(40, lambda model, loss: history.append(loss.item())).run.detail_spans()
    assert spans[0] == (0, escalation.QUIET_AT - 1, "full", "start"), spans


def test_the_html_report_says_which_steps_had_full_detail():
    html = _loop(40, lambda model, loss: None).to_html()
    q = escalation.QUIET_AT
    assert f"full detail on steps 0-{q - 1} (start)" in html
    assert f"the young steps ended at step {q}" in html


def test_a_leak_that_starts_after_a_quiet_start_is_named_in_a_growth_window(monkeypatch):
    monkeypatch.setattr(escalation, "SCREEN_BUDGET", 1e9)  # screen every few steps: these steps are short
    kept = []
    steps = {"n": 0}

    def leak_from_step_16(model, loss):
        steps["n"] += 1
        if steps["n"] > 16:
            kept.append(loss)  # each loss keeps its graph

    report = _loop(50, leak_from_step_16)
    spans = report.run.detail_spans()
    assert spans[0] == (0, escalation.QUIET_AT - 1, "full", "start"), spans
    assert any(why == "growth" for _, _, _, why in spans), spans
    assert report.verdict.value == "leak" and report.suspects[0].location == "kept", str(report)


def _tagged_steps(monkeypatch, steps: int, step_fn) -> list[int]:
    """The steps on which the tensor probe installed its creation-site tagging."""
    from memleak.probes import tagging, tensors

    tagged: list[int] = []

    class Spy(tagging.Tagging):
        def __init__(self, probe):
            tagged.append(probe._deep_step)
            super().__init__(probe)

    monkeypatch.setattr(tensors, "Tagging", Spy)
    _loop(steps, step_fn)
    return tagged


def test_a_quiet_young_run_tags_only_its_first_deep_steps_and_a_leaking_one_goes_on_tagging(monkeypatch):
    from memleak.probes.tensors import YOUNG_TAGGED

    quiet = _tagged_steps(monkeypatch, 12, lambda model, loss: None)
    assert len(quiet) == YOUNG_TAGGED, quiet  # the later young deep steps walk only
    kept = []
    leaking = _tagged_steps(monkeypatch, 12, lambda model, loss: kept.append(loss))
    assert len(leaking) > YOUNG_TAGGED + 1, leaking


def test_a_quiet_young_run_walks_at_steps_twice_as_far_apart_and_a_leaking_one_every_other_step():
    """While nothing was seen, each young deep step comes twice as far on as the last (1, 3, 7);
    once something grows, every other step, as at level full."""
    from memleak.probes.tensors import QUIET_CHECKS

    quiet = _loop(12, lambda model, loss: None).run
    young = [h.step for h in quiet.holders if h.step < escalation.QUIET_AT and h.step not in quiet.check_steps()]
    assert young == [1, 3, 7] and len(young) == QUIET_CHECKS, young
    assert [m.step for m in quiet.module_records] == [1, 3, 7]  # the module hooks too (their survivors are the tensors')
    kept: list = []
    leaking = _loop(12, lambda model, loss: kept.append(loss)).run
    assert [h.step for h in leaking.holders if h.step < 10] == [1, 3, 5, 7, 9]
    assert [m.step for m in leaking.module_records] == [1, 3, 7]
