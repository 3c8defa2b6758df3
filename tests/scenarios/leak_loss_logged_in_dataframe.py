"""The loss logged into a pandas DataFrame row by row with ``frame.loc[len(frame)] = [...]`` and
not ``loss.item()``: the frame's object column keeps every step's loss tensor with its graph.

Real case: https://discuss.pytorch.org/t/cuda-memory-continuously-increases-when-net-images-called-in-every-iteration/501/8
(a tensor kept for logging keeps its graph: "don't accumulate history"), in the form of the many
training scripts that log to a DataFrame, e.g. https://github.com/jokester-zzz/SSA-SC/issues/2
(losses kept as tensors for logging: "it should be loss[key].item()").
"""
import pandas as pd
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "log", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(59)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log = pd.DataFrame(columns=["step", "loss"])
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.loc[len(log)] = [step, loss]  # the leak: the tensor, not loss.item()
            tracker.step()
    return log
