"""A container the user's code trims to its last N items (a sliding window written by hand) fills
up like a leak until it holds N: read from the source, the bound makes it a bounded container."""
from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

import memleak
from memleak.probes.bounds import code_bound

SOURCE = textwrap.dedent('''
    MAX_KEPT = 50

    class Windows:
        def update(self, x):
            self.recent.append(x)
            if len(self.recent) > 100:
                self.recent.pop(0)
            self.at_most.append(x)
            if 30 <= len(self.at_most):
                self.at_most.popleft()
            self.last = self.last[-MAX_KEPT:]
            del self.tail[:-20]
            self.said.append(x)
            if len(self.said) > 10:
                print("long")
            self.by_attr.append(x)
            if len(self.by_attr) > self.size:
                self.by_attr.pop(0)
            if len(self.queue) == self.window:
                self.queue.popleft()
            self.queue.append(x)
            if len(self.memory) < self.size:
                self.memory.append(None)
            self.memory[self.position] = x
            if self.hard.__len__() < 10 or len(self.hard) <= 8:
                heapq.heappush(self.hard, x)
            if len(self.top) <= 8:
                heapq.heappush(self.top, x)
            if len(self.seen) < 4:
                print("few")
            if len(self.before) > 5:
                self.before.pop(0)
            self.before.append(x)
            heapq.heappush(self.best, x)
            if len(self.best) > self.k:
                heapq.heappop(self.best)
            heappush(self.worst, x)
            if len(self.worst) > 3:
                heappop(self.worst)
''')


def test_the_bound_is_read_from_a_guarded_trim_a_kept_slice_or_a_deleted_head(tmp_path):
    path = tmp_path / "windows.py"
    path.write_text(SOURCE)
    region = [(str(path), 1, 100)]
    assert code_bound("mon.recent", region) == 100  # appended, then trimmed to 100: 100 at the step's end
    assert code_bound("mon.before", region) == 6  # trimmed to 5, then appended: one more
    assert code_bound("at_most", region) == 30  # `N <= len(x)`, turned round
    assert code_bound("self.last", region) == 50  # a module constant
    assert code_bound("tail", region) == 20
    assert code_bound("said", region) is None  # the test guards no trim
    assert code_bound("by_attr", region) is None  # an attribute of an owner not given
    assert code_bound("mon.by_attr", region, {"size": 7}) == 7  # the owner's int attribute
    assert code_bound("mon.by_attr", region, {"size": "7"}) is None
    assert code_bound("queue", region, {"window": 5}) == 5
    assert code_bound("buffer.memory", region, {"size": 1000}) == 1000  # filled only while short of it
    assert code_bound("top", region) == 9  # `<= 8` guards a heappush
    assert code_bound("hard", region) is None  # a test that is no comparison of len()
    assert code_bound("seen", region) is None  # the test guards no add
    assert code_bound("mon.best", region, {"k": 5}) == 5  # a heap kept to its best k
    assert code_bound("worst", region) == 3  # `from heapq import heappop`
    assert code_bound("elsewhere", region) is None
    assert code_bound("recent", [(str(tmp_path / "missing.py"), 1, 10)]) is None


class PopWindow:
    def __init__(self):
        self.recent = []

    def update(self, out):
        self.recent.append(out.detach())
        if len(self.recent) > 100:
            self.recent.pop(0)


class WindowOfItsSize:
    """A window as real code writes it: its size an attribute (``self.window_size``)."""

    def __init__(self, window_size=100):
        self.window_size = window_size
        self.losses_window = []

    def update(self, out):
        self.losses_window.append(out.detach())
        if len(self.losses_window) > self.window_size:
            self.losses_window.pop(0)


class PopsOneAddsTwo:
    def __init__(self):
        self.pairs = []

    def update(self, out):
        self.pairs.append(out.detach())
        self.pairs.append(out.detach().clone())
        if len(self.pairs) > 10:
            self.pairs.pop(0)


def _report(monitor, steps: int = 40, **options) -> memleak.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, **options) as tracker:
        for _ in range(steps):
            out = model(torch.randn(16, 32))
            opt.zero_grad()
            out.pow(2).mean().backward()
            opt.step()
            monitor.update(out)
    return tracker.report()


@pytest.mark.parametrize("window", [PopWindow, WindowOfItsSize], ids=["literal", "owner_attribute"])
def test_a_window_the_code_keeps_to_100_items_is_no_leak_while_it_fills(window):
    report = _report(window())
    assert report.verdict.value != "leak", str(report)
    assert not any(s.leak for s in report.suspects), str(report)
    assert "the bound in your code" in str(report)
    assert report.suspects[0].fix.startswith("None needed: monitor."), report.suspects[0].fix


def test_a_far_bound_that_holds_much_of_the_memory_once_full_is_judged_as_any_holder():
    # 40 items: 10,000 is 250 times that, about 6 MiB once full, a tenth of a 64 MiB budget
    report = _report(WindowOfItsSize(window_size=10_000), steps=40, budget="64 MiB")
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "monitor.losses_window"
    assert "is bounded at 1000" in report.suspects[0].fix and "lower its bound" in report.suspects[0].fix


def test_a_far_bound_that_holds_little_once_full_is_no_leak():
    # the same 6 MiB once full, under 1 % of an 8 GiB budget: a window, not a leak
    report = _report(WindowOfItsSize(window_size=10_000), steps=40, budget="8 GiB")
    assert report.verdict.value != "leak", str(report)
    assert "the bound in your code" in str(report)


def test_a_trim_that_takes_fewer_items_than_the_loop_adds_is_still_a_leak():
    report = _report(PopsOneAddsTwo())
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "monitor.pairs", str(report)


class ReplayMemory:
    """The replay memory written before deques had a maxlen: filled while short of its limit, then
    overwritten in place (its limit under a name the owner check does not know)."""

    def __init__(self, buffer_limit):
        self.buffer_limit = buffer_limit
        self.memory = []
        self.position = 0

    def update(self, out):
        if len(self.memory) < self.buffer_limit:
            self.memory.append(None)
        self.memory[self.position] = out.detach()
        self.position = (self.position + 1) % self.buffer_limit


def test_a_memory_filled_only_while_short_of_its_limit_is_no_leak_while_it_fills():
    report = _report(ReplayMemory(buffer_limit=200))
    assert report.verdict.value != "leak", str(report)
    assert "the bound in your code" in str(report)
