"""Progressive unfreezing with ``add_param_group``: the optimizer starts with the head only; at
two points early in the run a deeper layer is unfrozen and added as a new group, together with an
auxiliary (deep-supervision) head that is not a submodule of the model. Adam makes state for each
new group on its next step: memory steps up twice (the optimizer's groups and state, partly for
parameters the model does not have), then stays flat for the rest of the run.

Real case: gradual unfreezing in fine-tuning, where the recommended way to train a layer later is
``optimizer.add_param_group`` once per unfrozen layer
(https://github.com/pytorch/pytorch/issues/53712 discusses groups added after construction).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=60):
    g = seed(47)
    model = MLP(hidden=384)
    for p in model.parameters():
        p.requires_grad_(False)
    model.head.requires_grad_(True)
    opt = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    aux_heads = []  # one per unfrozen stage: bounded
    stages = {max(1, steps // 8): model.fc2, max(2, steps // 4): model.fc1}
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            layer = stages.get(step)
            if layer is not None:
                layer.requires_grad_(True)
                aux = nn.Linear(384, 384)
                aux_heads.append(aux)
                opt.add_param_group({"params": [*layer.parameters(), *aux.parameters()], "lr": 1e-4})
            x, y = batch(g, n=64)
            h = torch.relu(model.fc2(torch.relu(model.fc1(x))))
            loss = nn.functional.cross_entropy(model.head(h), y)
            for aux in aux_heads:  # deep supervision: keep the hidden features close to a projection
                loss = loss + 1e-3 * (aux(h.detach()) - h.detach()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
