"""Multi-scale training of a conv net on the CPU: each batch comes at a random image size, and
oneDNN builds and caches its convolution primitives per new shape, so the C heap grows by hundreds
of KiB a step while new sizes appear (up to its cache's capacity, 1024 shapes). No tensor is kept.

Real case: https://github.com/pytorch/pytorch/issues/32037 ("MKLDNN convolution leaks memory when
input sizes vary") and https://github.com/pytorch/pytorch/issues/27971 ("High memory usage for CPU
inference on variable input shapes"); the cache is bounded by ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
(https://github.com/uxlfoundation/oneDNN/issues/489: "This is due to cache the MKL-DNN primitives
created for varying input size"). In 30 steps most sizes are new, so the growth does not level off:
no leak of the program's, and not provably bounded yet either.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "inconclusive", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(42)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            side = int(torch.randint(16, 64, (1,), generator=g))  # a new size most steps
            x = torch.randn(16, 3, side, side, generator=g)
            y = torch.randint(0, 10, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
