"""A `functools.lru_cache` with a `maxsize` is a bounded container (its `cache_info().maxsize`, as a
deque's maxlen): a cache of token lists far from full in a short run is no leak; the same cache
with `maxsize=None` is, and a heap of plain data kept to its best few is bounded as a list is."""
import functools

import torch

import memleak

from tests.helpers import model_and_optimizer


def _cached(maxsize, steps=30):
    @functools.lru_cache(maxsize=maxsize)
    def tokenize(text):
        return [ord(c) * 7 % 1000 for c in text]  # plain data: a list of ints per text

    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for step in range(steps):
            loss = model(torch.randn(32, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            for i in range(16):  # new texts every step
                tokenize(f"sample {step}-{i} " + "token " * 40)
            tracker.step()
    return tracker.report()


def test_a_bounded_lru_cache_still_filling_is_no_leak():
    report = _cached(maxsize=4096)
    assert report.verdict != "leak", str(report)
    assert not any(s.leak for s in report.suspects), str(report)


def test_the_same_cache_without_a_bound_is_a_leak():
    report = _cached(maxsize=None)
    assert report.verdict == "leak", str(report)
    assert "tokenize" in report.suspects[0].location, str(report)
