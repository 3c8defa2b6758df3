"""Best-k checkpointing in memory: every fifth step the model is validated and its state dict,
serialized with ``torch.save`` into bytes, is kept if it is among the five best so far (a heap keyed
by the validation loss; the worst is dropped once there are more than five). A 30-step run saves six
checkpoints, so the store grows by one serialized model at each of the first five saves: a staircase
like a leak's for most of the run, but bounded at five checkpoints by the code.

Real case: keras-team/keras https://github.com/keras-team/keras/issues/2611 (keeping the best
weights in RAM rather than on disk, and its cost: "you will end up having the weights twice in
memory"), and nicholas-leonard/dp https://github.com/nicholas-leonard/dp/issues/80 ("EarlyStopper
option for keeping best models in memory between epochs").
"""
import heapq
import io

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class TopKInMemory:
    def __init__(self, k=5):
        self.k = k
        self.heap = []  # (-val_loss, step, bytes): the worst on top

    def consider(self, val_loss, step, model):
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        heapq.heappush(self.heap, (-val_loss, step, buf.getvalue()))
        if len(self.heap) > self.k:
            heapq.heappop(self.heap)


def run(tracker_factory, steps=30):
    g = seed(551)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xv, yv = batch(g, n=256)
    best = TopKInMemory()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 5 == 4:
                with torch.no_grad():
                    val = nn.functional.cross_entropy(model(xv), yv).item()
                best.consider(val, step, model)
            tracker.step()
