"""In-memory checkpoint rotation with ``max_ckpt_num = 3``: every 8 steps the trainer snapshots the
model weights (``clone()`` of the state dict) into ``ckpt_manager.snapshots`` for fast rollback on
a loss spike, and deletes the oldest snapshot once more than three are kept. Memory steps up at
steps 8, 16 and 24 and is flat from then on (each later save replaces the oldest). In a 30-step run
three of the four saves are growth, so the short run looks like a staircase that never stops.

Real case: DeepSpeed "Memory leak when using adam_offload and save_checkpoint"
https://github.com/deepspeedai/DeepSpeed/issues/7370 (with ``--max_ckpt_num 3`` the memory curve
"increases 3 times (w.r.t. 3 ckpt saving steps) but will be stable afterwards"; with an unbounded
number it rises until OOM).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SAVE_EVERY = 8


class CheckpointManager:
    def __init__(self, max_ckpt_num=3):
        self.max_ckpt_num = max_ckpt_num
        self.snapshots = []  # (step, state dict copy)

    def save(self, step, model):
        self.snapshots.append((step, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        while len(self.snapshots) > self.max_ckpt_num:
            self.snapshots.pop(0)

    def rollback(self, model):
        model.load_state_dict(self.snapshots[-1][1])


def run(tracker_factory, steps=30):
    g = seed(305)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    manager = CheckpointManager()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 128, generator=g), torch.randint(0, 10, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            if not torch.isfinite(loss) and manager.snapshots:
                manager.rollback(model)
                continue
            opt.step()
            if (step + 1) % SAVE_EVERY == 0:
                manager.save(step, model)
            tracker.step()
