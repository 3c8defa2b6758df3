"""A Dataset's memo keyed by sample index stops at the dataset's length (a bounded container
filling up, not a leak), and many small tensors kept grow the host heap by more than their bytes
(each tensor's objects and allocation headers): both explain the heap's growth."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

import memleak
from memleak.detect.thresholds import TENSOR_HOST_OVERHEAD
from memleak.probes.walk_scope import index_bounds
from memleak.report.text import headline
from memleak.schema import Finding, Kind
from memleak.suspects import rank


class Memo(Dataset):
    def __init__(self, n=4096, key=lambda i, calls: i):
        g = torch.Generator().manual_seed(0)
        self.raw, self.labels = torch.randn(n, 48, generator=g), torch.randint(0, 4, (n,), generator=g)
        self.cache, self.key, self.calls = {}, key, 0

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        self.calls += 1
        k = self.key(i, self.calls)
        if k not in self.cache:
            self.cache[k] = self.raw[i] * 1.5
        return self.cache[k][:32], self.labels[i]


def _train(data, steps=30):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(1))
    with memleak.track(model, optimizer=opt) as tracker:
        epochs = (batch for _ in range(steps) for batch in loader)
        for _, (x, y) in zip(range(steps), epochs, strict=False):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return tracker.report()


def test_a_memo_keyed_by_sample_index_is_bounded_by_the_dataset():
    report = _train(Memo())
    assert report.verdict.value != "leak", str(report)
    memo = next(s for s in report.suspects if s.location.endswith("cache"))
    assert not memo.leak and any("at most 4096 items" in e for e in memo.evidence), str(report)
    assert "filling up to its bound" in headline(report)  # the memory's rise, explained up front
    # and the rise's own entry does not send the user looking for a leak it just explained
    rise = next(s for s in report.suspects if any("filling up to its bound" in e for e in s.evidence))
    assert rise.fix.startswith("None needed") and "running loss" not in rise.fix, rise.fix


def test_a_memo_that_filled_up_in_the_run_is_no_leak():
    # 64 steps an epoch: the heap grows over most of the run, and the walks at step 63 and at
    # close see the memo at its bound (it once lost its bound there and read as a leak)
    report = _train(Memo(n=4096), steps=80)
    assert report.verdict.value != "leak" and len(report.run.steps) >= 80, str(report)
    assert any("full: 4096 items" in e for s in report.suspects for e in s.evidence), str(report)


def test_a_memo_keyed_by_more_than_the_index_still_leaks():
    report = _train(Memo(key=lambda i, calls: (i, calls)))  # a key that never repeats
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location.endswith("cache")


def test_index_bounds_reads_only_a_sized_dataset_with_index_keys():
    data = Memo(n=100)
    data.cache.update({i: None for i in range(10)})
    assert index_bounds(data, vars(data)) == [(data.cache, 100)]
    data.cache["name"] = None  # not an index
    assert index_bounds(data, vars(data)) == []
    data.cache = {i: None for i in range(100)}  # as many keys as samples: full, still bounded
    assert index_bounds(data, vars(data)) == [(data.cache, 100)]
    data.cache[100] = None  # a key past the last sample: not an index
    assert index_bounds(data, vars(data)) == []

    class Stream(IterableDataset):
        def __init__(self):
            self.cache = {0: None}

        def __iter__(self):
            yield 0

    assert index_bounds(Stream(), vars(Stream())) == []
    assert index_bounds(object(), {"cache": {0: None}}) == []


def test_index_bounds_calls_the_datasets_len_only_beside_an_index_keyed_dict():
    class Counted(Dataset):
        calls = 0

        def __len__(self):  # the user's code: it may be slow, it is called only when needed
            Counted.calls += 1
            return 100

    assert index_bounds(Counted(), {"names": {"a": 1}, "items": [1, 2]}) == []
    assert Counted.calls == 0
    memo = {3: None}
    assert index_bounds(Counted(), {"memo": memo}) == [(memo, 100)] and Counted.calls == 1


def _finding(kind, location, bps, data=None):
    return Finding("test", kind, location, bps, bps * 30, 0.95, ("evidence",), "fix", True, data or {})


def test_small_tensors_explain_host_growth_beyond_their_bytes_but_not_device_growth():
    # a holder gaining 64 tensors of 192 B a step: 12 KiB of data, about 37 KiB on the heap
    held = {"count": [64.0, 64.0 * 30], "steps": [1, 30]}
    per_step = 64 * 192
    heap = per_step + 64 * TENSOR_HOST_OVERHEAD
    memo = _finding(Kind.SURVIVING_TENSORS, "memo", per_step, held)
    on_host = rank([memo, _finding(Kind.LINEAR_GROWTH, "heap_bytes", heap)])
    assert [s.location for s in on_host] == ["memo"]  # the heap's growth is the holder's, folded in
    on_device = rank([memo, _finding(Kind.LINEAR_GROWTH, "allocated_bytes", heap)])
    assert [s.location for s in on_device] == ["memo", "allocated_bytes"]
    assert any("look for a second cause" in e for e in on_device[1].evidence)
