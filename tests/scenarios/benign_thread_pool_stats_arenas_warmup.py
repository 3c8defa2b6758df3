"""Per-sample statistics of each step serialized to JSON in the background by a pool of four
threads (for a metrics sink); the loop waits for the step's futures before the next step, so no
work piles up. Each pool thread gets its own glibc malloc arena the first time it allocates, and an
arena keeps part of the largest burst it served; the resident size rises by a few MiB over the
first steps, while the threads are first used, then wobbles by about a MiB as pages are reused and
trimmed (measured without memleak: about +4.5 MiB from step 0 to step 10, flat to step 40). Bounded by the number of
threads; no Python object or tensor outlives its step.

Real case: dask/dask https://github.com/dask/dask/issues/3530 ("Memory leak with Numpy arrays and
the threaded scheduler"; gone with ``MALLOC_ARENA_MAX=1``) and odoo/odoo
https://github.com/odoo/odoo/pull/42306 ("glibc's malloc() uses arenas ... a threaded worker will
quickly reach its default memory soft limit").
"""

import json
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def serialize(step, shard, losses, probs):
    rows = [
        {"step": step, "shard": shard, "i": i, "loss": loss, "p": p}
        for i, (loss, p) in enumerate(zip(losses, probs, strict=True))
    ]
    return len(json.dumps(rows).encode())


def run(tracker_factory, steps=30):
    g = seed(5711)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sent = 0
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="stats") as pool:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=1024)
                logits = model(x)
                per_sample = nn.functional.cross_entropy(logits, y, reduction="none")
                loss = per_sample.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses = per_sample.detach().tolist()
                probs = logits.detach().softmax(1).tolist()
                futures = [pool.submit(serialize, step, k, losses[k::4], probs[k::4]) for k in range(4)]
                sent += sum(f.result() for f in futures)
                tracker.step()
