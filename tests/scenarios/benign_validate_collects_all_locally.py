"""Every tenth training step a ``validate()`` pass runs under ``torch.no_grad()`` and collects
every validation batch's inputs, ground truths and predicted label maps into local lists
(``inputs_all``, ``gts_all``, ``predictions_all``) to compute the confusion matrix and save a few
samples. The lists are locals of ``validate()``: several MiB pile up during the pass and are all
given back when it returns. The memory curve is a flat line with a tall spike every tenth step, the
shape a naive profiler that samples at the wrong moment reads as growth.

Real case: samleoqh/MSCG-Net https://github.com/samleoqh/MSCG-Net/issues/34 ("The process consume
a lot of memory ... I think the problem in the ``validate`` function. Because you append all the
input/output data to the ``inputs_all, gts_all, predictions_all``"): a large peak, not a leak, as
long as the lists die with the call.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VAL_EVERY, VAL_BATCHES, HW, CLASSES = 10, 12, 48, 5


def validate(net, val_loader):
    net.eval()
    inputs_all, gts_all, predictions_all = [], [], []
    with torch.no_grad():
        for inputs, gts in val_loader:
            outputs = net(inputs)
            inputs_all.append(inputs.clone())
            gts_all.append(gts.clone())
            predictions_all.append(outputs.argmax(1))
    preds = torch.cat(predictions_all).flatten()
    gts = torch.cat(gts_all).flatten()
    conf = torch.bincount(gts * CLASSES + preds, minlength=CLASSES * CLASSES).reshape(CLASSES, CLASSES)
    iou = conf.diag() / (conf.sum(0) + conf.sum(1) - conf.diag()).clamp(min=1)
    net.train()
    return iou.mean().item()


def run(tracker_factory, steps=30):
    g = seed(34)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, CLASSES, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    val_loader = [(torch.randn(4, 3, HW, HW, generator=g), torch.randint(0, CLASSES, (4, HW, HW), generator=g))
                  for _ in range(VAL_BATCHES)]
    scores = []
    with tracker_factory(net, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(4, 3, HW, HW, generator=g)
            y = torch.randint(0, CLASSES, (4, HW, HW), generator=g)
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % VAL_EVERY == VAL_EVERY - 1:
                scores.append(validate(net, val_loader))
            tracker.step()
