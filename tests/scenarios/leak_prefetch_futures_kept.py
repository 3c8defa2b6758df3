"""A background prefetcher that loads batches with a thread pool and keeps every ``Future`` it
submitted: a finished future keeps its result, so every batch ever loaded stays in memory.

Real case: mapchete https://github.com/mapchete/mapchete/pull/362 ("let Executor keep track of
running futures and remove finished ones to save memory") and xtuner
https://github.com/InternLM/xtuner/pull/1229 (``submit`` is non-blocking and "will accumulate lots
of cpu tensor and will cause cpu oom"). Here the loop reads ``futures[step].result()`` one step
ahead of the pool, and the list of futures is never trimmed.
"""
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ._common import DIM, MLP, seed


def load_batch(i, device, n=128):
    # the default device is the calling thread's (torch.device(...) is a thread-local mode): passed in
    g = torch.Generator("cpu").manual_seed(1000 + i)
    x = torch.randn(n, DIM, generator=g, device="cpu")
    y = torch.randint(0, 8, (n,), generator=g, device="cpu")
    return x.to(device), y.to(device)


def run(tracker_factory, steps=30):
    seed(48)
    model = MLP(hidden=128, d_out=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pool = ThreadPoolExecutor(max_workers=1)
    dev = torch.get_default_device()
    futures = [pool.submit(load_batch, 0, dev)]
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                futures.append(pool.submit(load_batch, step + 1, dev))  # the leak: never trimmed
                x, y = futures[step].result()
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        pool.shutdown()
        futures.clear()


EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "futures", "top": 1}
