"""A TorchScript module's attributes live in its C++ object, not its ``__dict__``: a ``List[Tensor]``
its forward appends to every step is walked (a Python copy of the same tensors each walk) and named
by its attribute path; one the module empties each step is no suspect."""
from typing import List

import torch
from torch import nn

import memleak


class Encoder(nn.Module):
    history: List[torch.Tensor]  # noqa: UP006 (TorchScript reads the annotation)

    def __init__(self, clear: bool):
        super().__init__()
        self.fc = nn.Linear(32, 128)
        self.history = []
        self.clear = clear

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if self.clear:
            self.history.clear()
        self.history.append(h.detach())
        return h


def _run(clear: bool):
    torch.manual_seed(0)
    model = nn.Sequential(torch.jit.script(Encoder(clear)), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            loss = model(torch.randn(256, 32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    return tracker.report()


def test_a_scripted_modules_list_attribute_that_grows_is_named():
    report = _run(clear=False)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "0.history", str(report)


def test_one_emptied_each_step_is_no_suspect():
    report = _run(clear=True)
    assert report.verdict.value != "leak", str(report)
    assert all("history" not in s.location for s in report.suspects), str(report)
