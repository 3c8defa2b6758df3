"""A few-shot episode loop run entirely inside one ``torch.autocast("cpu", dtype=torch.bfloat16)``
block (entered once, around the whole loop): each episode builds a fresh classifier head
(``nn.Linear``, a leaf requiring grad), fits it for a few steps on the support set on top of a
frozen-ish backbone, then classifies the queries. Autocast caches the bf16 cast of every leaf
tensor that requires grad, keyed by the tensor, and only clears that cache when the outermost
autocast block exits. The heads die at the end of their episode, but their cached casts do not:
one bf16 copy of each episode's head weights survives, held by autocast's C++ cache that no
Python object points to.

Real case: pytorch https://github.com/pytorch/pytorch/issues/48049 ("native amp consumes 10x gpu
memory"; ezyang: "suppose that ... you're generating fresh new parameters every iteration of the
loop ... the *cached cast output* doesn't get" freed; "AMP leaks memory when you use AMP outside
of your training loop"), https://github.com/pytorch/pytorch/issues/86136 (autocast cache entries
that are never cleared leak permanently), and ecmwf/anemoi-core
https://github.com/ecmwf/anemoi-core/issues/134 ("amp.autocast caching lower_precision_fp casts
of fp32 model weights"; fixed with ``cache_enabled=False``).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "autocast", "top": 1}
D, WAYS = 256, 256


def run(tracker_factory, steps=30):
    g = seed(816)
    backbone = nn.Sequential(nn.Linear(64, D), nn.ReLU(), nn.Linear(D, D))
    backbone_opt = torch.optim.SGD(backbone.parameters(), lr=1e-3)
    with tracker_factory(backbone, optimizer=backbone_opt) as tracker:
        with torch.autocast("cpu", dtype=torch.bfloat16):  # entered once, around every episode
            for step in range(steps):
                support = torch.randn(WAYS, 64, generator=g)
                labels = torch.arange(WAYS)
                head = nn.Linear(D, WAYS)  # fresh leaf parameters each episode
                head_opt = torch.optim.SGD(head.parameters(), lr=0.1)
                for _ in range(2):
                    loss = nn.functional.cross_entropy(head(backbone(support)).float(), labels)
                    head_opt.zero_grad()
                    backbone_opt.zero_grad()
                    loss.backward()
                    head_opt.step()
                query = torch.randn(64, 64, generator=g)
                with torch.no_grad():
                    preds = head(backbone(query)).argmax(1)  # noqa: F841
                backbone_opt.step()
                del head, head_opt
                tracker.step()
