"""Mean-teacher distillation: the teacher is a deep copy of the student whose weights follow the
student by an exponential moving average updated in place under ``torch.no_grad()`` (``lerp_``),
and whose outputs are used as targets each step, never kept. Nothing grows.

Real case: https://discuss.pytorch.org/t/how-to-efficiently-reduce-gpu-memory-for-knowledge-distillation-training/135346
(teacher outputs under ``torch.no_grad()``, the recommended way) and
https://discuss.pytorch.org/t/tips-for-implementing-knowledge-distillation/117459.
"""
import copy

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class MeanTeacher:
    def __init__(self, student, decay=0.99):
        self.teacher = copy.deepcopy(student).requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, student):
        for t, s in zip(self.teacher.parameters(), student.parameters()):
            t.lerp_(s, 1 - self.decay)

    @torch.no_grad()
    def targets(self, x):
        return torch.softmax(self.teacher(x), -1)


def run(tracker_factory, steps=30):
    g = seed(523)
    student = MLP(hidden=128, d_out=10)
    opt = torch.optim.Adam(student.parameters(), lr=1e-3)
    mt = MeanTeacher(student)
    with tracker_factory(student, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(128, DIM, generator=g)
            y = torch.randint(0, 10, (128,), generator=g)
            s = student(x + 0.1 * torch.randn(128, DIM, generator=g))
            consistency = nn.functional.mse_loss(torch.softmax(s, -1), mt.targets(x))
            loss = nn.functional.cross_entropy(s, y) + consistency
            opt.zero_grad()
            loss.backward()
            opt.step()
            mt.update(student)
            tracker.step()
