"""Best-model tracking with ``best_state = model.state_dict()`` (no ``deepcopy``/``clone``)
whenever the validation loss improves. ``state_dict()`` returns references to the live parameter
tensors, so the "snapshot" silently follows the model (a correctness bug) but costs no extra
memory: only one small dict of references is alive at a time. Memory is flat.

Real case: pytorch/tutorials https://github.com/pytorch/tutorials/pull/188 ("Fixed deep copying
model.state_dict(): Otherwise best_model_wts changes always to last epoch's state") and PyPOTS
https://github.com/WenjieDu/PyPOTS/issues/667 ("state_dict returns a reference to the dict").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(119)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xv, yv = batch(g, n=256)
    best_loss, best_state = float("inf"), None
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                val = nn.functional.cross_entropy(model(xv), yv).item()
            if val < best_loss:
                best_loss, best_state = val, model.state_dict()  # references, no copy
            tracker.step()
    return best_state
