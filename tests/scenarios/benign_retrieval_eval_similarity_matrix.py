"""A dual encoder trained with in-batch negatives and evaluated every few steps on a held-out set
with recall@k: the evaluation encodes all queries and documents, builds the full query x document
similarity matrix (1,500 x 1,500 floats, 9 MB), ranks each query's positive and keeps two floats,
recall@1 and recall@5. The matrix and the embeddings are dropped when the evaluation returns, so
memory jumps by megabytes at each evaluation and comes back; only the small float history grows.

Real case: mlfoundations/open_clip https://github.com/mlfoundations/open_clip/issues/11 ("Massive
GPU memory usage during evaluation": "During evaluation, we compute metrics such as recall @ k.
... this involves some very big matrices if the evaluation dataset is big").
"""

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EVAL_EVERY = 5


@torch.no_grad()
def evaluate(encoder, val_q, val_d):
    q = nn.functional.normalize(encoder(val_q), dim=1)
    d = nn.functional.normalize(encoder(val_d), dim=1)
    sims = q @ d.T
    positive = sims.diagonal().unsqueeze(1)
    ranks = (sims > positive).sum(1)
    return {"recall@1": (ranks < 1).float().mean().item(), "recall@5": (ranks < 5).float().mean().item()}


def run(tracker_factory, steps=30):
    g = seed(5707)
    encoder = MLP(hidden=256, d_out=128)
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    val_q = torch.randn(1500, 32, generator=g)
    val_d = val_q + 0.3 * torch.randn(1500, 32, generator=g)
    history = []
    with tracker_factory(encoder, optimizer=opt) as tracker:
        for step in range(steps):
            xq = torch.randn(128, 32, generator=g)
            xd = xq + 0.3 * torch.randn(128, 32, generator=g)
            q = nn.functional.normalize(encoder(xq), dim=1)
            d = nn.functional.normalize(encoder(xd), dim=1)
            loss = nn.functional.cross_entropy(q @ d.T / 0.05, torch.arange(128))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % EVAL_EVERY == EVAL_EVERY - 1:
                history.append({"step": step, **evaluate(encoder, val_q, val_d)})
            tracker.step()
