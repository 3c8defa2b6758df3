"""Asynchronous checkpointing every 6 steps: the trainer stages a CPU copy of the model and
optimizer state (``clone()`` of every tensor) on the training thread and submits the write to a
one-thread ``ThreadPoolExecutor``; only the latest Future is kept. The staged copy lives in the
work item's arguments while the background write runs and is dropped as soon as the work item
finishes, so memory jumps at each save and falls back once the write is done: a sawtooth driven by
a background thread, never more than one staged copy (plus one being written) alive.

Real case: OLMo-core "Free staged state dict during async checkpointer callbacks"
https://github.com/allenai/OLMo-core/issues/856 (the staged state dict submitted to a
ThreadPoolExecutor stays in the work item's ``args`` until the future and its callbacks finish),
and the PyTorch async_save memory discussion https://github.com/pytorch/pytorch/issues/170163.
Here the write target is an in-memory buffer that is thrown away.
"""
import io
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SAVE_EVERY = 6


def _write(staged):
    buf = io.BytesIO()
    torch.save(staged, buf)
    return buf.tell()  # only the size survives the write


class AsyncCheckpointer:
    def __init__(self):
        self.executor = ThreadPoolExecutor(max_workers=1)
        self.last_future = None
        self.sizes = []

    def save_async(self, model, opt):
        if self.last_future is not None:
            self.sizes.append(self.last_future.result())  # at most one write in flight
        staged = {
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "optim": {i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
                      for i, s in opt.state_dict()["state"].items()},
        }
        self.last_future = self.executor.submit(_write, staged)

    def close(self):
        if self.last_future is not None:
            self.sizes.append(self.last_future.result())
        self.executor.shutdown(wait=True)


def run(tracker_factory, steps=30):
    g = seed(304)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = AsyncCheckpointer()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = torch.randn(64, 128, generator=g), torch.randint(0, 10, (64,), generator=g)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if (step + 1) % SAVE_EVERY == 0:
                    ckpt.save_async(model, opt)
                tracker.step()
    finally:
        ckpt.close()
