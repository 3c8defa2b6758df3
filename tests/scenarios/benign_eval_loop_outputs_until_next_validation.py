"""A hand-written trainer in the style of PyTorch Lightning 1.1: every 10 training steps it runs a
validation pass of 6 batches under ``torch.no_grad()`` and its evaluation loop keeps every
validation step's outputs (detached logits and embeddings) in ``trainer.evaluation_loop.outputs``
for the epoch-end hook. The list is not freed after the hook; it is only replaced when the next
validation starts. Memory therefore steps up at the first validation and then stays at one
validation's worth of outputs: a "bounded leak", as the maintainers called it, not growth.

Real case: "Bounded memory leak caused by `trainer.evalutaion_loop.outputs`"
https://github.com/Lightning-AI/pytorch-lightning/issues/5735 (outputs of every validation step
cached until the start of the next validation epoch).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Net(nn.Module):
    def __init__(self, d=64, hidden=256, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = self.body(x)
        return self.head(h), h


class EvaluationLoop:
    def __init__(self):
        self.outputs = []

    def run(self, model, batches):
        self.outputs = []  # replaced at the start of each validation, not freed after it
        with torch.no_grad():
            for x, y in batches:
                logits, emb = model(x)
                self.outputs.append({"logits": logits, "emb": emb, "y": y})
        return sum(float((o["logits"].argmax(1) == o["y"]).float().mean()) for o in self.outputs) / len(self.outputs)


class Trainer:
    def __init__(self):
        self.evaluation_loop = EvaluationLoop()
        self.val_acc = []


def run(tracker_factory, steps=30):
    g = seed(302)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = Trainer()
    val_batches = [(torch.randn(128, 64, generator=g), torch.randint(0, 10, (128,), generator=g)) for _ in range(6)]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
            logits, _ = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % 10 == 0:
                trainer.val_acc.append(trainer.evaluation_loop.run(model, val_batches))
            tracker.step()
