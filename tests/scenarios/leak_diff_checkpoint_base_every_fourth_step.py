"""Cheap "diff" checkpoints every 4th step: to write only what changed, the saver keeps the weights
of the last save and stores the difference to them. The bug: instead of replacing the reference
weights it appends them (``self.bases.append(...)``) and also keeps each diff for a later
consolidation that never runs. Three steps in four allocate nothing that survives; every fourth
step leaves two copies of the weights behind, so the growth is slow and in bursts.

Real case: "CPU Memory Leak When Saving Checkpoints During Fine-tuning"
https://github.com/Physical-Intelligence/openpi/issues/721 ("after each model checkpoint is saved,
a portion of the CPU RAM is not released. This memory usage accumulates with each save"), and
https://github.com/deepspeedai/DeepSpeed/issues/7370 (a non-negligible increase at every
checkpoint-saving step).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "saver.bases", "top": 1}
SAVE_EVERY = 4


class DiffSaver:
    def __init__(self):
        self.bases = []
        self.diffs = []
        self.written = 0

    def save(self, model):
        current = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if self.bases:
            base = self.bases[-1]
            diff = {k: current[k] - base[k] for k in current}
            self.diffs.append(diff)
            self.written += sum(int((d != 0).sum()) for d in diff.values())
        self.bases.append(current)  # the leak: self.bases = [current]


def run(tracker_factory, steps=30):
    g = seed(402)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    saver = DiffSaver()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 128, generator=g), torch.randint(0, 10, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % SAVE_EVERY == SAVE_EVERY - 1:
                saver.save(model)
            tracker.step()
