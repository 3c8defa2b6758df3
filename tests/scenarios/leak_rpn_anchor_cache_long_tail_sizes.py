"""The memoizing anchor generator of ``leak_rpn_anchor_cache_varying_aspect`` (``self._cache`` keyed by
the feature-map geometry) on a COCO-like dataset with aspect ratio kept: most images share a few
common sizes (landscape 4:3 and portrait 3:4 camera shots), the rest come from a long tail of
several hundred crop sizes. A common size hits the cache; a tail size almost always adds a new entry
(about 0.3 MiB of anchors). New entries come more slowly than one a step, but they keep coming for
as long as there are unseen sizes in the tail, hundreds of them, far more than a run fits in memory
before it ends.

Real case: pytorch/vision https://github.com/pytorch/vision/issues/1689 ("My dataset has varying aspect
ratios ... After a few iterations, memory will oscillate but still have an upwards trend") and the cache
clear of https://github.com/pytorch/vision/pull/1657.
"""
import torch
from torch import nn

from ._common import seed
from .leak_rpn_anchor_cache_varying_aspect import TinyRPN

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "_cache", "top": 1}

COMMON = ((192, 256), (256, 192), (256, 256))
TAIL_HEIGHTS = tuple(range(96, 512, 8))
TAIL_WIDTHS = (160, 192, 224, 256, 288)


def run(tracker_factory, steps=30):
    g = seed(1657)
    model = TinyRPN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            if float(torch.rand(1, generator=g)) < 0.55:
                h, w = COMMON[int(torch.randint(0, len(COMMON), (1,), generator=g))]
            else:
                h = TAIL_HEIGHTS[int(torch.randint(0, len(TAIL_HEIGHTS), (1,), generator=g))]
                w = TAIL_WIDTHS[int(torch.randint(0, len(TAIL_WIDTHS), (1,), generator=g))]
            images = torch.randn(1, 3, h, w, generator=g)
            box = torch.tensor([[40.0, 30.0, 120.0, 100.0]])
            logits, anchors = model(images)
            cx = (anchors[:, 0] + anchors[:, 2]) / 2
            cy = (anchors[:, 1] + anchors[:, 3]) / 2
            target = ((cx > box[0, 0]) & (cx < box[0, 2]) & (cy > box[0, 1]) & (cy < box[0, 3])).float()
            loss = nn.functional.binary_cross_entropy_with_logits(logits[0], target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
