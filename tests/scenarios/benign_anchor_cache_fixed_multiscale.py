"""The same memoizing anchor generator (``self._cache`` keyed by the feature-map geometry) in a
detector trained with YOLO-style multi-scale training: each step draws its square input size from a
fixed list of six sizes (256 to 416 in steps of 32). The cache gains an entry the first time each size
shows up and none after that; it is at most six entries (about 4 MiB) for the whole run. Its growth in
the first steps looks like the unbounded cache of the varying-aspect-ratio case, but it saturates.

Real case: pytorch/vision https://github.com/pytorch/vision/issues/3667 (the maintainers ask whether the
``AnchorGenerator`` cache really leaks, to "measure precisely the size of the cache" on a real dataset,
and propose an LRU cache instead: keyed by geometry, the cache is bounded whenever the set of input
sizes is); the unbounded version is https://github.com/pytorch/vision/issues/1689.
"""
import torch
from torch import nn

from ._common import seed
from .leak_rpn_anchor_cache_varying_aspect import TinyRPN

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

SCALES = (256, 288, 320, 352, 384, 416)


def run(tracker_factory, steps=30):
    g = seed(3667)
    model = TinyRPN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            size = SCALES[int(torch.randint(0, len(SCALES), (1,), generator=g))]
            images = torch.randn(1, 3, size, size, generator=g)
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
