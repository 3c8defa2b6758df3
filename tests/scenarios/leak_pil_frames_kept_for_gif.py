"""A visualisation of each step kept as a PIL image, to be assembled into an animated GIF at the
end of training. Each frame keeps its pixels in memory Pillow allocates itself: ``sys.getsizeof``
of an image is a few dozen bytes and tracemalloc does not see the pixels, so only counting what an
image holds (width x height x bytes a pixel) shows where the host memory goes.

Real case: https://github.com/johnwmillr/Facer/pull/7 ("the library was storing intermediate
results from each face in memory in order to generate animated GIFs": OOM-killed after about 50
images on a 16 GB laptop; fixed by keeping them only when asked for).
"""
import numpy as np
import torch
from PIL import Image
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "gif_frames", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(97)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gif_frames = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64, classes=64)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            heat = (logits.detach().softmax(-1).numpy() * 255).astype(np.uint8)
            gif_frames.append(Image.fromarray(heat).convert("RGB").resize((256, 256)))  # the leak
            tracker.step()
