"""Knowledge distillation over a small fixed dataset (6 batches, reshuffled never): the frozen
teacher's soft targets are cached by batch index under ``torch.no_grad()``. The cache fills during
the first epoch and then only hits: bounded.

Real case: the teacher-output caching discussed in
https://discuss.pytorch.org/t/tips-for-implementing-knowledge-distillation/117459.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

N_BATCHES = 6
T = 4.0


def run(tracker_factory, steps=30):
    g = seed(512)
    data = [(torch.randn(128, DIM, generator=g), torch.randint(0, 10, (128,), generator=g)) for _ in range(N_BATCHES)]
    teacher = MLP(hidden=256, d_out=10).eval()
    student = MLP(hidden=32, d_out=10)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    teacher_cache = {}
    with tracker_factory(student, optimizer=opt) as tracker:
        for step in range(steps):
            i = step % N_BATCHES
            x, y = data[i]
            if i not in teacher_cache:
                with torch.no_grad():
                    teacher_cache[i] = teacher(x)
            s_logits = student(x)
            kd = nn.functional.kl_div(torch.log_softmax(s_logits / T, -1), torch.softmax(teacher_cache[i] / T, -1),
                                      reduction="batchmean") * T * T
            loss = kd + nn.functional.cross_entropy(s_logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
