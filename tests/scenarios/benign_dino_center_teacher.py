"""DINO self-distillation: a student trained on several crops of each image, a momentum teacher
(an EMA copy of the student, no gradients) that sees only the two global crops, and a loss module
whose ``center`` buffer (a running mean of the teacher's outputs) is replaced by a new tensor of
the same size every step under ``torch.no_grad()``. Every step makes new tensors (the crops, the
teacher's outputs, the new center) and lets the previous ones go: memory is flat.

Real case: ``DINOLoss`` and the training loop of https://github.com/facebookresearch/dino/blob/main/main_dino.py
(``self.register_buffer("center", torch.zeros(1, out_dim))``; ``update_center`` is
``@torch.no_grad()`` and does ``self.center = self.center * self.center_momentum + batch_center *
(1 - self.center_momentum)``; the teacher is updated with ``param_k.data.mul_(m).add_((1 - m) *
param_q.detach().data)``; ``teacher_output = teacher(images[:2])``, the student sees all crops).
Here 2 global and 4 local crops (noisy copies of a batch), a 256-way head, momentum 0.996.
"""
import copy

import torch
from torch import nn
from torch.nn import functional as F

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, teacher_temp=0.04, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp = student_temp, teacher_temp
        self.center_momentum = center_momentum
        self.ncrops = ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_output, teacher_output):
        student_out = (student_output / self.student_temp).chunk(self.ncrops)
        teacher_out = F.softmax((teacher_output - self.center) / self.teacher_temp, dim=-1).detach().chunk(2)
        total, terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                total = total + torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
                terms += 1
        self.update_center(teacher_output)
        return total / terms

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = teacher_output.sum(dim=0, keepdim=True) / len(teacher_output)
        # a new tensor each step, rebound to the buffer: the old center is freed
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def run(tracker_factory, steps=30, ncrops=6, out_dim=256):
    g = seed(75)
    student = MLP(hidden=128, d_out=out_dim)
    teacher = copy.deepcopy(student)
    for p in teacher.parameters():
        p.requires_grad = False
    dino_loss = DINOLoss(out_dim, ncrops)
    opt = torch.optim.AdamW(student.parameters(), lr=5e-4)
    with tracker_factory(student, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(32, DIM, generator=g)
            crops = [x + 0.1 * torch.randn(x.shape, generator=g) for _ in range(ncrops)]
            teacher_output = teacher(torch.cat(crops[:2]))  # only the 2 global crops
            student_output = student(torch.cat(crops))
            loss = dino_loss(student_output, teacher_output)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pq, pk in zip(student.parameters(), teacher.parameters(), strict=True):
                    pk.data.mul_(0.996).add_((1 - 0.996) * pq.detach().data)
            tracker.step()
