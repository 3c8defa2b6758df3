"""A trainer streams pre-computed feature shards from disk with ``torch.load(path, mmap=True)``
and, besides training on each shard, keeps the shard's first row "as an anchor" in a list. A row
is a view: it keeps the shard's whole memory-mapped storage alive, and the pages it has touched
(the whole shard was read for training) stay resident, so every step pins one more shard.

Real case: "There is a memory leak in torch.load" https://github.com/pytorch/pytorch/issues/102334
(with ``mmap=True``, "its basically loading all the value you have accessed and keep it in the
memory till the point you delete" the loaded object), and the view-keeps-base pattern of
https://github.com/konstmish/prodigy/pull/22.
"""
import os
import shutil
import tempfile

import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "anchors", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(124)
    tmp = tempfile.mkdtemp(prefix="memleak_mmap_")
    try:
        paths = []
        for i in range(steps):  # the "feature extraction" job wrote these shards beforehand
            p = os.path.join(tmp, f"shard{i}.pt")
            torch.save({"x": torch.randn(2048, DIM, generator=g),
                        "y": torch.randint(0, 4, (2048,), generator=g)}, p)
            paths.append(p)
        model = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        anchors = []
        with tracker_factory(model, optimizer=opt) as tracker:
            for p in paths:
                shard = torch.load(p, mmap=True, weights_only=True)
                loss = nn.functional.cross_entropy(model(shard["x"]), shard["y"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                anchors.append(shard["x"][0])  # the leak: a view that pins the whole mmapped shard
                tracker.step()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
