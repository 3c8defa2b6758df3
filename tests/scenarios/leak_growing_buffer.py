"""A memory-bank buffer (MoCo-style queue) that is concatenated to every step instead of kept a fixed size.

Real case: the deep_lift_shap fix https://github.com/jmschrei/tangermeme/pull/84 (tensors stored
on modules are kept for the module's lifetime) and the Hugging Face ``past_key_value`` growth
discussed in https://github.com/huggingface/transformers/issues/25930 (``torch.cat`` on a cache).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed


class Bank(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.register_buffer("queue", torch.zeros(0, d))

    def forward(self, z):
        self.queue = torch.cat([self.queue, z.detach()])  # the leak: never dequeued
        return z


EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "bank.queue", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(12)
    model = nn.Sequential()
    model.add_module("net", MLP())
    model.add_module("bank", Bank())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
