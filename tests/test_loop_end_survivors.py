"""Tensors the loop's own scope keeps (a generator it iterates, which keeps every batch it made)
pile up for as long as the loop runs and are freed only when it ends. Level auto's last check, after
the loop's last step, finds none of them alive: they are judged at the check before, as a level
that samples the last step judges them; a bounded buffer, which keeps its newest tensors, is not."""
import collections

import torch

import memleak
from memleak.detect.survivors import birth_findings
from memleak.records import BirthCohort, BirthsRecord

from tests.helpers import model_and_optimizer

STEPS = 60  # level auto's last sampled step is long before the last step: its last check runs after the loop


def _batches(n, keep):
    kept = [] if keep is None else collections.deque(maxlen=keep)
    g = torch.Generator().manual_seed(3)
    for _ in range(n):
        x = torch.randn(64, 64, generator=g)
        kept.append(x)  # meant for a second pass
        yield x


def _loop(keep=None, out=None):
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="auto", out=out) as tracker:
        for x in _batches(STEPS, keep):  # the generator is on the loop's stack only: it ends with the loop
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    return tracker


def test_batches_a_generator_keeps_until_the_loop_ends_are_named():
    tracker = _loop()
    report = tracker.report()
    assert report.verdict == "leak", str(report)
    top = report.suspects[0]
    assert top.location == "kept (local of generator _batches)", str(report)
    if tracker.run().births[-1].final:  # a growth window that runs to the last step leaves no check after it
        assert "freed only when the loop ended" in str(top), str(report)


HELD = "kept (local of generator batches)"


def _checks(alive_after_the_loop, final=True):
    """Survivor checks every 2 steps, each finding alive every batch tagged so far, then the check
    after the loop's last step, which finds the batches born on `alive_after_the_loop` only."""
    checks = []
    for step in range(3, 31, 2):
        born = range(1, step - 1, 2)
        kept = tuple(BirthCohort(born=b, site="train.py:12", holder=HELD, count=1, bytes=16384) for b in born)
        checks.append(BirthsRecord(step=step, cohorts=kept, gc2=0))
    left = tuple(c for c in checks[-1].cohorts if c.born in alive_after_the_loop)
    return [*checks, BirthsRecord(step=40, cohorts=left, gc2=0, final=final)]


def _judged(checks):
    findings = {}
    birth_findings(checks, [], {}, findings, collected_at=[])  # no full collection ran
    return findings.get(HELD)


def test_what_the_loop_end_freed_is_judged_at_the_last_check_in_the_loop():
    f = _judged(_checks(alive_after_the_loop=()))
    assert f is not None and f["leak"], f
    assert any("freed only when the loop ended" in line for line in f["evidence"]), f["evidence"]


def test_a_buffer_that_keeps_its_newest_batches_after_the_loop_is_judged_at_the_end():
    assert _judged(_checks(alive_after_the_loop=(25, 27))) is None  # a window of the last two


def test_only_the_check_after_the_loop_counts_as_its_end():
    assert _judged(_checks(alive_after_the_loop=(), final=False)) is None  # all freed inside the loop: a reset


def test_the_run_file_judges_them_the_same(tmp_path):
    _loop(out=tmp_path / "run")
    report = memleak.analyze(memleak.load(tmp_path / "run"))
    assert report.suspects[0].location == "kept (local of generator _batches)", str(report)


def test_a_generator_that_keeps_its_last_batches_only_is_no_leak():
    report = _loop(keep=3).report()
    assert report.verdict != "leak", str(report)
    assert not any(s.leak for s in report.suspects), str(report)
