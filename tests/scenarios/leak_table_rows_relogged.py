"""A wandb-style ``Table`` of sample predictions kept for the whole run: each step adds a few rows
(the step, the input image tensor, the predicted and true class) to one table held by the
training script, and logs the whole table again so the dashboard shows the new rows. The logger
here is a home-made stand-in (``Run.log`` only records the table's size), but the table lives in
the script and keeps every row's image tensor: ``table.data`` grows by four images a step.

Real case: wandb https://github.com/wandb/wandb/issues/2768 ("Table is not updating when logging
the same table with new rows": adding rows to one table each epoch and re-logging it) and
https://github.com/wandb/wandb/issues/1826 (maintainer: "Keep the wandb.Table locally and add new
rows to it"), with the memory cost of rows of images discussed in
https://github.com/wandb/wandb/pull/2249 ("Reduce Memory Footprint of Images In Tables").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "table.data", "top": 1}


class Table:
    def __init__(self, columns):
        self.columns = list(columns)
        self.data = []

    def add_data(self, *row):
        self.data.append(list(row))


class Run:
    def __init__(self):
        self.summary = {}

    def log(self, d, step=None):
        for k, v in d.items():
            self.summary[k] = len(v.data) if isinstance(v, Table) else v


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


def run(tracker_factory, steps=30):
    g = seed(513)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run_ = Run()
    table = Table(columns=["step", "image", "pred", "target"])
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(32, 3, 32, 32, generator=g)
            y = torch.randint(0, 10, (32,), generator=g)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            preds = logits.detach().argmax(1)
            for i in range(4):
                table.add_data(step, x[i].clone(), int(preds[i]), int(y[i]))
            run_.log({"loss": loss.item(), "samples": table}, step=step)
            tracker.step()
