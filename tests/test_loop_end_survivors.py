"""Tensors the loop's own scope keeps (a generator it iterates, which keeps every batch it made)
pile up for as long as the loop runs and are freed only when it ends. Level auto's last check, after
the loop's last step, finds none of them alive: they are judged at the check before, as a level
that samples the last step judges them; a bounded buffer, which keeps its newest tensors, is not."""
import collections

import torch

import memleak

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
    report = _loop().report()
    assert report.verdict == "leak", str(report)
    top = report.suspects[0]
    assert top.location == "kept (local of generator _batches)", str(report)
    assert "freed only when the loop ended" in str(top), str(report)


def test_the_run_file_judges_them_the_same(tmp_path):
    _loop(out=tmp_path / "run")
    report = memleak.analyze(memleak.load(tmp_path / "run"))
    assert report.suspects[0].location == "kept (local of generator _batches)", str(report)


def test_a_generator_that_keeps_its_last_batches_only_is_no_leak():
    report = _loop(keep=3).report()
    assert report.verdict != "leak", str(report)
    assert not any(s.leak for s in report.suspects), str(report)
