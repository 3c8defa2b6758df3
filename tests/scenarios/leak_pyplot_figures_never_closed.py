"""A plot of each step's outputs made with pyplot and never closed: pyplot keeps every figure it
opens in its own registry (``plt.get_fignums()`` grows by one a step) until ``plt.close``. No
variable of the loop holds the figures, so no holder is there to name: the line that opens them
is, with the library that keeps what it makes.

Real case: https://github.com/matplotlib/matplotlib/issues/20300 ("Memory leak when plotting in
a loop", figures kept by pyplot until closed) and pyplot's own warning, "More than 20 figures
have been opened ... retained until explicitly closed and may consume too much memory"
(https://matplotlib.org/stable/api/_as_gen/matplotlib.pyplot.figure.html).
"""
import warnings

import matplotlib
import torch
from torch import nn

from ._common import MLP, batch, seed

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "leak_pyplot_figures_never_closed.py:", "top": 1}


def run(tracker_factory, steps=40):
    g = seed(71)
    model = MLP(hidden=96, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with warnings.catch_warnings(), tracker_factory(model, optimizer=opt) as tracker:
            warnings.simplefilter("ignore", RuntimeWarning)  # "More than 20 figures have been opened"
            for _ in range(steps):
                x, y = batch(g, n=64, classes=64)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                plt.figure()
                plt.imshow(logits.detach().numpy())  # the leak: the figure is never closed
                tracker.step()
    finally:
        plt.close("all")
