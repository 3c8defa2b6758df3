"""A small two-level region-proposal network whose anchor generator memoizes the anchors of every
feature-map geometry in ``self._cache``, keyed by ``str(grid_sizes) + str(strides)`` (the
torchvision ``AnchorGenerator.cached_grid_anchors`` of 2019). The dataset keeps each image's aspect
ratio (batch size 1, width fixed, height varies), so nearly every step brings a grid geometry not
seen before and the cache gains one full set of anchors (a few hundred KiB) per step; nothing ever
evicts it.

Real case: pytorch/vision https://github.com/pytorch/vision/issues/1689 ("Memory leak in forward
pass on FasterRCNN with varying aspect ratio": "Training with varying sizes but constant aspect
ratio ... solves the issue"), fixed by clearing the cache in
https://github.com/pytorch/vision/pull/1657 ("``rpn._cache`` keeps the pair with the model and the
number of tensors it holds expands"), and the caching finally removed in
https://github.com/pytorch/vision/issues/3667.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "_cache", "top": 1}

SIZES = (32.0, 64.0)
RATIOS = (0.5, 1.0, 2.0)


class AnchorGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self._cache = {}

    def base_anchors(self, size):
        r = torch.tensor(RATIOS)
        h = size * r.sqrt()
        w = size / r.sqrt()
        return torch.stack([-w, -h, w, h], dim=1) / 2

    def grid_anchors(self, grid_sizes, strides):
        out = []
        for (gh, gw), s, size in zip(grid_sizes, strides, SIZES):
            ys = torch.arange(gh, dtype=torch.float32) * s
            xs = torch.arange(gw, dtype=torch.float32) * s
            yy, xx = torch.meshgrid(ys, xs, indexing="ij")
            shifts = torch.stack([xx, yy, xx, yy], dim=-1).reshape(-1, 1, 4)
            out.append((shifts + self.base_anchors(size)[None]).reshape(-1, 4))
        return out

    def forward(self, feature_maps, image_size):
        grid_sizes = [tuple(f.shape[-2:]) for f in feature_maps]
        strides = [image_size[0] // g[0] for g in grid_sizes]
        key = str(grid_sizes) + str(strides)
        if key not in self._cache:  # the leak: one entry per image geometry, never evicted
            self._cache[key] = self.grid_anchors(grid_sizes, strides)
        return torch.cat(self._cache[key])


class TinyRPN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(16, 32, 2, stride=2), nn.ReLU())
        self.obj4 = nn.Conv2d(16, len(RATIOS), 1)
        self.obj8 = nn.Conv2d(32, len(RATIOS), 1)
        self.anchor_generator = AnchorGenerator()

    def forward(self, images):
        f4 = self.stem(images)
        f8 = self.down(f4)
        anchors = self.anchor_generator([f4, f8], images.shape[-2:])
        logits = torch.cat([self.obj4(f4).permute(0, 2, 3, 1).reshape(images.shape[0], -1),
                            self.obj8(f8).permute(0, 2, 3, 1).reshape(images.shape[0], -1)], dim=1)
        return logits, anchors


def run(tracker_factory, steps=30):
    g = seed(1689)
    model = TinyRPN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            height = 8 * int(torch.randint(24, 64, (1,), generator=g))  # aspect ratio kept
            images = torch.randn(1, 3, height, 256, generator=g)
            box = torch.tensor([[40.0, 30.0, 120.0, 100.0]])
            logits, anchors = model(images)
            # objectness target: anchors whose centre falls inside the ground-truth box
            cx = (anchors[:, 0] + anchors[:, 2]) / 2
            cy = (anchors[:, 1] + anchors[:, 3]) / 2
            target = ((cx > box[0, 0]) & (cx < box[0, 2]) & (cy > box[0, 1]) & (cy < box[0, 3])).float()
            loss = nn.functional.binary_cross_entropy_with_logits(logits[0], target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
