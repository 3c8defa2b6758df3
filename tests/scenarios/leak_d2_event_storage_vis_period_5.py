"""``leak_d2_event_storage_vis_images_never_written`` with a visualization period: the trainer only
renders and ``put_image``s a visualization every 5 iterations (``VIS_PERIOD: 5``), at a larger size
(the input and the predicted mask side by side at 3x96x192), and no writer ever calls
``storage.clear_images()``. Memory climbs in a staircase, one step up every fifth iteration, and never
comes down: ``storage._vis_data`` keeps every visualization of the run.

Real case: facebookresearch/detectron2 https://github.com/facebookresearch/detectron2/issues/2832
("set VIS_PERIOD: 20 in the config yaml file and run training ... MAKE CPU RAM NO LONGER INCREASES
WITHOUT LIMIT when VIS_PERIOD set positive").
"""
import torch
from torch import nn

from ._common import seed
from .leak_d2_event_storage_vis_images_never_written import EventStorage, JSONWriter, SegNet, visualize

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "storage._vis_data", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(525)
    model = SegNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    storage = EventStorage()
    writers = [JSONWriter()]
    vis_period = 5
    with tracker_factory(model, optimizer=opt) as tracker:
        for it in range(steps):
            storage.iter = it
            images = torch.rand(2, 3, 96, 96, generator=g)
            masks = (torch.rand(2, 1, 96, 96, generator=g) > 0.5).float()
            logits = model(images)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, masks)
            opt.zero_grad()
            loss.backward()
            opt.step()
            storage.put_scalar("total_loss", loss)
            if (it + 1) % vis_period == 0:
                storage.put_image("Left: input; Right: predicted mask", visualize(images, logits))
            for w in writers:
                w.write(storage)
            tracker.step()
