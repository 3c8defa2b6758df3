"""Knowledge distillation with a frozen teacher whose soft targets are cached to avoid recomputing
them, keyed by ``(epoch, batch_idx)``: the key changes every step, so the cache only grows (with
the teacher's logits and penultimate features, computed under ``torch.no_grad()``).

Real case: https://discuss.pytorch.org/t/how-to-efficiently-reduce-gpu-memory-for-knowledge-distillation-training/135346
(a frozen teacher guiding a student; memory of the distillation loop) and the teacher-output caching
discussed in https://discuss.pytorch.org/t/tips-for-implementing-knowledge-distillation/117459.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "teacher_cache", "top": 1}

STEPS_PER_EPOCH = 1000  # one epoch outlasts the run
T = 4.0


class Distiller:
    def __init__(self, teacher, student):
        self.teacher = teacher
        self.student = student
        self.teacher_cache = {}

    def soft_targets(self, key, x):
        if key not in self.teacher_cache:
            with torch.no_grad():
                h = torch.relu(self.teacher.fc2(torch.relu(self.teacher.fc1(x))))
                self.teacher_cache[key] = (self.teacher.head(h), h)
        return self.teacher_cache[key]

    def loss(self, key, x, y):
        t_logits, _ = self.soft_targets(key, x)
        s_logits = self.student(x)
        kd = nn.functional.kl_div(torch.log_softmax(s_logits / T, -1), torch.softmax(t_logits / T, -1),
                                  reduction="batchmean") * T * T
        return kd + nn.functional.cross_entropy(s_logits, y)


def run(tracker_factory, steps=30):
    g = seed(511)
    teacher = MLP(hidden=256, d_out=10).eval()
    student = MLP(hidden=32, d_out=10)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    d = Distiller(teacher, student)
    with tracker_factory(student, optimizer=opt) as tracker:
        for step in range(steps):
            epoch, batch_idx = divmod(step, STEPS_PER_EPOCH)
            x = torch.randn(128, DIM, generator=g)
            y = torch.randint(0, 10, (128,), generator=g)
            loss = d.loss((epoch, batch_idx), x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
