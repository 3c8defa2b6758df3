"""``benign_d2_event_storage_images_flushed`` with detectron2's default writer period: the
TensorBoard-style writer runs every 20 iterations (``PeriodicWriter(writers, period=20)`` in
``DefaultTrainer.build_hooks``), so ``storage._vis_data`` gains an image every step for 20 steps and is
emptied by ``clear_images()`` at each write. Over a 30-step run that is one long climb, a drop and a
shorter climb; over 60 steps, three teeth of the same height. Bounded by the writer period, not a leak.

Real case: https://github.com/facebookresearch/detectron2/issues/2832 (images put with ``VIS_PERIOD``
pile up in the event storage unless a writer consumes them); detectron2's ``TensorboardXWriter.write``
calls ``storage.clear_images()`` after writing ``storage._vis_data``.
"""
import torch
from torch import nn

from ._common import seed
from .benign_d2_event_storage_images_flushed import TensorboardImageWriter
from .leak_d2_event_storage_vis_images_never_written import EventStorage, JSONWriter, SegNet, visualize

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(524)
    model = SegNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    storage = EventStorage()
    json_writer, tb_writer = JSONWriter(), TensorboardImageWriter()
    write_period = 20
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
            storage.put_image("Left: input; Right: predicted mask", visualize(images, logits))
            json_writer.write(storage)
            if (it + 1) % write_period == 0:
                tb_writer.write(storage)
            tracker.step()
