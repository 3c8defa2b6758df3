"""A hand-written copy of detectron2's ``EventStorage`` and training-visualization hook. With
``VIS_PERIOD`` set, the trainer renders the step's input next to the model's predicted heat map and
calls ``storage.put_image(name, img)``; ``put_image`` only appends ``(name, img, iter)`` to
``storage._vis_data``, and the list is emptied by ``clear_images()``, which only the TensorBoard writer
calls after writing the images out. This trainer is set up with the console and JSON writers only
(no ``TensorboardXWriter``), so every visualization stays in ``storage._vis_data`` for the whole run.

Real case: facebookresearch/detectron2 https://github.com/facebookresearch/detectron2/issues/2832
("CPU RAM increases and get OOM": "set VIS_PERIOD: 20 in the config yaml file and run training ...
CPU RAM NO LONGER INCREASES WITHOUT LIMIT when VIS_PERIOD set positive").
"""
import json
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "storage._vis_data", "top": 1}


class EventStorage:
    def __init__(self):
        self._history = defaultdict(list)  # name -> [(value, iter)], plain floats
        self._vis_data = []
        self.iter = 0

    def put_scalar(self, name, value):
        self._history[name].append((float(value), self.iter))

    def put_image(self, img_name, img_tensor):
        self._vis_data.append((img_name, img_tensor, self.iter))

    def clear_images(self):
        self._vis_data = []

    def latest(self):
        return {k: v[-1][0] for k, v in self._history.items()}


class JSONWriter:
    def __init__(self):
        self.lines = []

    def write(self, storage):
        self.lines = self.lines[-20:] + [json.dumps(storage.latest())]  # scalars only, bounded


class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 3, padding=1))

    def forward(self, x):
        return self.body(x)


def visualize(images, logits):
    heat = torch.sigmoid(logits[0]).expand(3, -1, -1)
    return torch.cat([images[0], 0.5 * images[0] + 0.5 * heat], dim=2).detach().clone()  # (3, H, 2W)


def run(tracker_factory, steps=30):
    g = seed(523)
    model = SegNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    storage = EventStorage()
    writers = [JSONWriter()]  # no TensorboardXWriter: nobody calls clear_images()
    vis_period = 1
    with tracker_factory(model, optimizer=opt) as tracker:
        for it in range(steps):
            storage.iter = it
            images = torch.rand(4, 3, 64, 64, generator=g)
            masks = (torch.rand(4, 1, 64, 64, generator=g) > 0.5).float()
            logits = model(images)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, masks)
            opt.zero_grad()
            loss.backward()
            opt.step()
            storage.put_scalar("total_loss", loss)
            if vis_period and it % vis_period == 0:
                storage.put_image("Left: input; Right: predicted mask", visualize(images, logits))
            for w in writers:
                w.write(storage)
            tracker.step()
