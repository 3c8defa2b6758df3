"""The bounded form of ``leak_d2_event_storage_vis_images_never_written``: the same detectron2-style
``EventStorage`` with ``put_image`` every step, but the trainer's writers include a TensorBoard-style
writer that runs every 5 iterations (detectron2's ``PeriodicWriter`` period), writes the buffered
images out and calls ``storage.clear_images()``. ``storage._vis_data`` holds at most 5 images: a
sawtooth, not a leak.

Real case: the fix for https://github.com/facebookresearch/detectron2/issues/2832 is to have a writer
that consumes the visualizations; detectron2's ``TensorboardXWriter.write`` ends with
``storage.clear_images()`` after ``add_image`` for each of ``storage._vis_data``.
"""
import torch
from torch import nn

from ._common import seed
from .leak_d2_event_storage_vis_images_never_written import EventStorage, JSONWriter, SegNet, visualize

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class TensorboardImageWriter:
    """Stands for TensorboardXWriter: 'writes' the images (a checksum here) and clears them."""

    def __init__(self):
        self.written = 0
        self.checksum = 0.0

    def write(self, storage):
        for _name, img, _it in storage._vis_data:
            self.checksum += float(img.mean())
            self.written += 1
        storage.clear_images()


def run(tracker_factory, steps=30):
    g = seed(523)
    model = SegNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    storage = EventStorage()
    json_writer, tb_writer = JSONWriter(), TensorboardImageWriter()
    write_period = 5
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
