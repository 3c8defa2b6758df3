"""A bounded container still filling up (``collections.deque(maxlen=...)``) is no leak, while the
same window without a bound, one whose bound is far away, or one that keeps autograd graphs is."""
import collections

import torch

import memleak

from tests.helpers import model_and_optimizer


def _step(model, opt):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, gn


class Guard:
    def __init__(self, maxlen):
        self.losses = collections.deque(maxlen=maxlen)
        self.norms = collections.deque(maxlen=maxlen)


def _windowed(maxlen, steps=30, keep_graph=False):
    model, opt = model_and_optimizer()
    guard = Guard(maxlen)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):
            loss, gn = _step(model, opt)
            guard.losses.append(loss if keep_graph else loss.detach())
            guard.norms.append(gn)
    return tracker.report()


def test_a_deque_window_filling_towards_its_maxlen_is_clean():
    # 30 steps into a window of 100: it grew every step, but it stops at 100 tensors
    report = _windowed(maxlen=100)
    assert report.verdict == "clean", str(report)
    assert not any(s.leak for s in report.suspects), str(report)


def test_the_same_window_without_a_bound_is_a_leak():
    report = _windowed(maxlen=None)
    assert report.verdict == "leak", str(report)
    assert "guard." in report.suspects[0].location, str(report)


def test_a_bound_far_beyond_what_the_window_holds_is_no_excuse():
    # a maxlen of 10**6 one-step tensors is no bound a run would ever reach
    report = _windowed(maxlen=10**6)
    assert report.verdict == "leak", str(report)
    assert "guard." in report.suspects[0].location, str(report)


def test_a_bounded_window_of_tensors_with_graphs_still_leaks_their_graphs():
    report = _windowed(maxlen=100, keep_graph=True)
    assert report.verdict == "leak", str(report)
    assert "guard.losses" in report.suspects[0].location, str(report)
