"""SwAV with its feature queue, as in facebookresearch/swav ``main_swav.py``: the queue is not
allocated at the start but when the epoch counter reaches ``epoch_queue_starts`` (here a step
counter, step 10), as one zero tensor of shape (2 crops, 1024, 64). From then on it is shifted and
filled in place under ``torch.no_grad()`` (``queue[i, bs:] = queue[i, :-bs].clone()``,
``queue[i, :bs] = embedding``) and used for the Sinkhorn codes only once it is full (last row
non-zero). The prototypes are re-normalized in place each step. Memory steps up once, mid-run, by
about 0.5 MiB and then stays flat: a late one-time allocation, not a leak.

Real case: lightly-ai/lightly https://github.com/lightly-ai/lightly/pull/1019 ("Use queue prototypes only
when enough features are queued", as implemented in swav's ``main_swav.py``) and the queue advice in
https://github.com/facebookresearch/swav/issues/37 (single-GPU SwAV: "I would suggest using a queue").
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

FEAT, N_PROTOS, QUEUE_LEN, BS = 64, 100, 1024, 64


class SwAVNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.projection = nn.Linear(128, FEAT)
        self.prototypes = nn.Linear(FEAT, N_PROTOS, bias=False)

    def forward(self, x):
        z = nn.functional.normalize(self.projection(self.backbone(x)), dim=1)
        return z, self.prototypes(z)


@torch.no_grad()
def sinkhorn(out, iters=3, eps=0.05):
    q = torch.exp(out / eps).T
    q /= q.sum()
    k, b = q.shape
    for _ in range(iters):
        q /= q.sum(dim=1, keepdim=True)
        q /= k
        q /= q.sum(dim=0, keepdim=True)
        q /= b
    return (q * b).T


def run(tracker_factory, steps=30):
    g = seed(1019)
    model = SwAVNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    queue, queue_starts = None, 10
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            with torch.no_grad():  # normalize the prototypes
                w = nn.functional.normalize(model.prototypes.weight.data.clone(), dim=1)
                model.prototypes.weight.copy_(w)
            if step >= queue_starts and queue is None:
                queue = torch.zeros(2, QUEUE_LEN, FEAT)  # allocated once, mid-run
            x = torch.randn(BS, DIM, generator=g)
            crops = [x + 0.1 * torch.randn(BS, DIM, generator=g) for _ in range(2)]
            zs, outs = zip(*(model(c) for c in crops))
            loss = 0.0
            for i in range(2):
                with torch.no_grad():
                    out = outs[i].detach()
                    if queue is not None:
                        if torch.all(queue[i, -1] != 0):
                            out = torch.cat((queue[i] @ model.prototypes.weight.T, out))
                        queue[i, BS:] = queue[i, :-BS].clone()
                        queue[i, :BS] = zs[i].detach()
                    q = sinkhorn(out)[-BS:]
                p = torch.log_softmax(outs[1 - i] / 0.1, dim=1)
                loss = loss - (q * p).sum(dim=1).mean()
            opt.zero_grad()
            (loss / 2).backward()
            opt.step()
            tracker.step()
