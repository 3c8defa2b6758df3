"""Multi-task training with one shared trunk and 24 task-specific heads (``nn.ModuleDict``); each
step trains on one task, visiting the tasks in a shuffled order. ``zero_grad()`` sets gradients to
``None`` and Adam skips parameters whose gradient is ``None``, so a head's ``exp_avg`` /
``exp_avg_sq`` are only created the first time its task is drawn. Optimizer state therefore grows
step by step until every head has been visited once (step 24) and is flat afterwards.

Real case: the ``Optimizer.zero_grad`` documentation,
https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html ("torch.optim
optimizers have a different behavior if the gradient is 0 or None (in one case it does the step
with a gradient of 0 and in the other it skips the step altogether)"), and the lazily created Adam
state of per-expert/per-task parameters discussed in
https://github.com/deepspeedai/DeepSpeed/pull/2041 (optimizer memory grows linearly with the number
of experts).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
N_TASKS = 24


class MultiTaskNet(nn.Module):
    def __init__(self, d=64, hidden=256, out=64):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, hidden), nn.ReLU())
        self.heads = nn.ModuleDict({f"task{i}": nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))
                                    for i in range(N_TASKS)})

    def forward(self, x, task):
        return self.heads[task](self.trunk(x))


def run(tracker_factory, steps=30):
    g = seed(306)
    model = MultiTaskNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    order = torch.randperm(N_TASKS, generator=g).tolist()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            task = f"task{order[step % N_TASKS]}"
            x, y = torch.randn(32, 64, generator=g), torch.randint(0, 64, (32,), generator=g)
            loss = nn.functional.cross_entropy(model(x, task), y)
            opt.zero_grad()  # set_to_none=True: untouched heads keep grad None, Adam skips them
            loss.backward()
            opt.step()
            tracker.step()
