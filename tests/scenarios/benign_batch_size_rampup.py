"""Batch-size ramp-up: the global batch grows step by step through the stretch watched (Megatron's
``rampup_batch_size``, DeepSeek's 25 % -> 100 % ramp), so the batch a loop variable holds at each
step end is a new tensor, larger than the last, for the whole run. Nothing is carried from one step
to the next: no leak, though one tensor grows and the heap follows the new shapes.

Real case: huggingface/transformers#31222, https://github.com/huggingface/transformers/issues/31222
("increment the batch size according to some schedule, similar to how lr can follow a schedule";
DeepSeek-V2 ramped the per-device batch from 288 to 1152), and NVIDIA/apex#1212.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def batch_size(step: int, start: int = 32, increment: int = 16) -> int:
    return start + increment * step  # the ramp: a bigger batch every step of the stretch watched


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = batch_size(step)
            x = torch.randn(n, DIM, generator=g)
            y = torch.randint(0, 4, (n,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
