"""A detector trained with YOLO-style mosaic augmentation and a trailing image buffer: the
dataset keeps each image it loads (resized, as uint8) in ``self.ims[i]`` and its index in
``self.buffer`` so that the three extra mosaic tiles can be drawn from recently loaded images
instead of re-reading the disk. When the buffer reaches ``max_buffer_length`` the oldest index is
popped and its image released (``self.ims[j] = None``). The dataset's image store grows for the
first steps (eight batches here) and then stays at the buffer length: bounded, though it looks like
a dataset cache filling up.

Real case: ultralytics/ultralytics https://github.com/ultralytics/ultralytics/issues/4751 ("Mosaic
indices above 0 are loaded from a trailing buffer of the last 1000 images loaded during that
epoch") and https://github.com/ultralytics/ultralytics/pull/2791 ("Buffered Mosaic for reduced HDD
reads").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

S = 64


class MosaicDataset:
    def __init__(self, n, g, max_buffer_length=128):
        self.n, self.g = n, g
        self.ims = [None] * n
        self.buffer = []
        self.max_buffer_length = max_buffer_length

    def load_image(self, i):
        im = self.ims[i]
        if im is None:
            im = torch.randint(0, 256, (3, S, S), dtype=torch.uint8, generator=self.g)  # stands in for imread + resize
            self.ims[i] = im
            self.buffer.append(i)
            if len(self.buffer) >= self.max_buffer_length:
                j = self.buffer.pop(0)
                self.ims[j] = None  # released: the buffer is bounded
        return im

    def __getitem__(self, i):
        tiles = [self.load_image(i)]
        for k in torch.randint(0, len(self.buffer), (3,), generator=self.g).tolist():
            tiles.append(self.load_image(self.buffer[k]))
        top = torch.cat(tiles[:2], 2)
        bottom = torch.cat(tiles[2:], 2)
        mosaic = torch.cat([top, bottom], 1).float() / 255
        return nn.functional.interpolate(mosaic[None], size=(S, S), mode="bilinear", align_corners=False)[0]


class TinyDetector(nn.Module):
    def __init__(self, classes=8):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU())
        self.head = nn.Conv2d(32, 5 + classes, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


def run(tracker_factory, steps=30):
    g = seed(4113)
    data = MosaicDataset(100_000, g)
    model = TinyDetector()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            idx = torch.randint(0, data.n, (16,), generator=g).tolist()
            x = torch.stack([data[i] for i in idx])
            target = torch.rand(16, 13, S // 4, S // 4, generator=g)
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
