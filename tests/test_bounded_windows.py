"""A bounded container still filling up (``collections.deque(maxlen=...)``, a list beside the
``capacity`` its owner keeps) is no leak, while the same window without a bound, one whose bound is
far away or passed, or one that keeps autograd graphs is."""
import collections

import torch

import memleak

from tests.helpers import model_and_optimizer
from tests.scenarios.benign_replay_buffer_fills import ReplayMemory  # a list grown to `capacity`, then overwritten


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
    # an 8 GiB budget: what a bound holds once full is judged against it, whatever the machine's RAM
    with memleak.track(model, optimizer=opt, level="full", budget="8 GiB") as tracker:
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


def test_a_far_bound_that_holds_little_once_full_is_clean():
    # 30 steps into a window of 1000 (a progress bar's smoothing): far from full, but under a MB then
    report = _windowed(maxlen=1000)
    assert report.verdict == "clean", str(report)
    assert "at most 1000 items" in str(report)
    # 0-d losses: 4 B of data each, ~390 B of host memory with their objects, which the bound holds too
    assert "of host memory with each tensor's own objects) once full" in str(report), str(report)


def test_the_same_window_without_a_bound_is_a_leak():
    report = _windowed(maxlen=None)
    assert report.verdict == "leak", str(report)
    assert "guard." in report.suspects[0].location, str(report)


def test_a_bound_far_beyond_what_the_window_holds_is_no_excuse():
    # a maxlen of 10**6 one-step tensors: about 400 MB of their objects once full, 5 % of the budget
    report = _windowed(maxlen=10**6)
    assert report.verdict == "leak", str(report)
    assert "guard." in report.suspects[0].location, str(report)


def test_a_bounded_window_of_tensors_with_graphs_still_leaks_their_graphs():
    report = _windowed(maxlen=100, keep_graph=True)
    assert report.verdict == "leak", str(report)
    assert "guard.losses" in report.suspects[0].location, str(report)


def _replay(capacity, steps=20, unbounded=False):
    model, opt = model_and_optimizer()
    memory = ReplayMemory(capacity)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):
            x = torch.randn(64, 64)
            loss, _ = _step(model, opt)
            if unbounded:  # the same class, its bound ignored: every transition kept
                memory.items.append((x, loss.detach()))
            else:
                memory.push(x, loss.detach())
    return tracker.report()


def test_a_list_filling_towards_the_capacity_its_owner_keeps_is_no_leak():
    # 20 steps into a replay memory of 64: it grew every step, but `capacity` says where it stops
    report = _replay(capacity=64)
    assert report.verdict.value != "leak", str(report)
    held = next(s for s in report.suspects if s.location == "memory.items")
    assert not held.leak and any("bounded container" in e and "64 items" in e for e in held.evidence), held


def test_a_list_that_passed_the_capacity_beside_it_is_a_leak():
    # the bound is no excuse once the list holds more than it: capacity 8, 20 transitions kept
    report = _replay(capacity=8, unbounded=True)
    assert report.verdict.value == "leak" and report.suspects[0].location == "memory.items", str(report)


def test_bound_names_are_container_bounds_only():
    from memleak.probes.walk_scope import owner_bound

    assert owner_bound({"capacity": 24, "items": []}) == 24
    assert owner_bound({"max_size": 10}) == 10
    # lengths, steps and flags are no bounds of a container
    assert owner_bound({"max_length": 512, "max_steps": 1000, "window": 5}) is None
    assert owner_bound({"capacity": True}) is None and owner_bound({"capacity": 0}) is None
