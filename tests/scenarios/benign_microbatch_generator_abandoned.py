"""Gradient accumulation over micro-batches drawn from a generator that stages the whole batch
(``staged``, the batch split into chunks) in its frame. The loop stops early when a token budget is
reached, so the generator is never exhausted: it stays suspended, with its frame and ``staged``,
after the step's loop has ended. It looks like the "generator keeps a batch list" leak, but the
generator is only held by the local ``chunks``, which the next step rebinds: the old generator is
then closed and freed with everything its frame held. At most one step's batch is pinned.

Real case: ray-project/ray https://github.com/ray-project/ray/pull/60598 ("Get rid of generators
to avoid intermediate state pinning": a suspended generator keeps its locals, the batch it is on,
until it is resumed or dropped), the bounded counterpart of the generator-held list in
https://github.com/justheuristic/prefetch_generator/issues/8.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def microbatches(x, y, size):
    staged = list(zip(x.split(size), y.split(size)))  # the whole batch, pinned while suspended
    for xb, yb in staged:
        yield xb, yb


def run(tracker_factory, steps=30):
    g = seed(3115)
    model = MLP(hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=1024)
            budget = 384 + 128 * (step % 3)  # samples per optimizer step
            chunks = microbatches(x.clone(), y, 128)  # the previous step's generator is freed here
            opt.zero_grad()
            seen = 0
            for xb, yb in chunks:
                (nn.functional.cross_entropy(model(xb), yb) * len(yb) / budget).backward()
                seen += len(yb)
                if seen >= budget:
                    break  # the generator stays suspended with `staged` until `chunks` is rebound
            opt.step()
            tracker.step()
