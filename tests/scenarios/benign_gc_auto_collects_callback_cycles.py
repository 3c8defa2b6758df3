"""An embedding lookup returns an "awaitable" whose completion callback refers back to the
awaitable itself (``self._callback = lambda: self._finish()``), a reference cycle that also holds
the step's pooled embeddings (detached, 64 x 256 floats) and a little per-feature metadata (a few
dozen small dicts). Reference counting cannot free such a cycle, so each step's awaitable
outlives the step; Python's automatic cyclic collector (left on, default thresholds) frees them
whenever generation 0 fills up, which the metadata objects make happen every few steps. Memory
therefore rises for a few steps and drops back, again and again: an irregular sawtooth with a flat
floor, not a leak.

Real case: torchrec "Remove refcycle in SequenceEmbeddingsAwaitable"
https://github.com/meta-pytorch/torchrec/pull/1226 (the callback of the awaitable pointed back to
itself, keeping many tensors alive until a gc collect), and
https://github.com/pytorch/pytorch/issues/20199 ("the memory consumption keeps increasing until
reaching CPython's threshold", constant with ``gc.collect()``).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
N_FEATURES = 40


class PooledAwaitable:
    def __init__(self, pooled, meta):
        self.pooled = pooled
        self.meta = meta
        self._callback = lambda: self._finish()  # the cycle: self -> lambda -> self

    def _finish(self):
        return self.pooled

    def wait(self):
        return self._callback()


class SparseArch(nn.Module):
    def __init__(self, n_ids=2000, d=256):
        super().__init__()
        self.table = nn.EmbeddingBag(n_ids, d, mode="mean")
        self.over = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 1))

    def lookup(self, ids, offsets):
        pooled = self.table(ids, offsets)
        lengths = torch.diff(offsets, append=torch.tensor([ids.numel()]))[:N_FEATURES]
        # per-feature metadata, as a KeyedJaggedTensor-like holder keeps it
        meta = [{"feature": f"f{i}", "length": int(n), "offsets": [0, int(n)]} for i, n in enumerate(lengths.tolist())]
        awaitable = PooledAwaitable(pooled.detach(), meta)
        awaitable.wait()  # dropped on return, but its cycle keeps it (and its tensor) alive
        return pooled


def run(tracker_factory, steps=30):
    g = seed(301)
    model = SparseArch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            ids = torch.randint(0, 2000, (64 * 8,), generator=g)
            offsets = torch.arange(0, 64 * 8, 8)
            pooled = model.lookup(ids, offsets)
            label = torch.rand(64, generator=g)
            loss = nn.functional.binary_cross_entropy_with_logits(model.over(pooled).squeeze(-1), label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
