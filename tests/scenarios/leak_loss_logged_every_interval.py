"""The loss is kept for logging only at each log interval, but as the tensor itself (not
``loss.item()``): every logged loss keeps its whole autograd graph, the activations saved for
its backward included, so memory steps up once per interval and never comes back.

Real case: fairseq https://github.com/facebookresearch/fairseq/issues/2255 (the criterion's
``logging_output = {'loss': loss, ...}`` kept the loss with its graph for logging: host memory grew
as training went on; fixed by logging ``loss.data``, ``detach()`` preferred), the same mistake in
Uni-Mol https://github.com/deepmodeling/Uni-Mol/issues/173, and wandb
https://github.com/wandb/wandb/issues/354 ("when I log pytorch tensor values, I end up with memory
leak ... if I log ``tensor.item()`` memory leak disappears"). Logging every few steps, as most
loops do, makes the growth a staircase: one graph per interval, flat in between.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "logged_losses", "top": 1}

LOG_EVERY = 5


def run(tracker_factory, steps=40):
    g = seed(64)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logged_losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % LOG_EVERY == 0:
                logged_losses.append(loss)  # the leak: loss.item() keeps a float, not the graph
            tracker.step()
