"""A background metrics thread: the loop hands each step's predictions to it through a queue, and
the thread keeps every one in a local list for a report at the end of training. The list lives in
the thread's running frame, not in any variable of the loop's: it grows by one batch of
predictions a step for as long as the run lasts.

Real case: pytorch https://github.com/pytorch/pytorch/issues/64412 ("custom dataloader with
threads ... memory usage slowly grows over the epoch leading to OOM", gc.get_objects() showing "a
growing list of tensors" made in the thread). The fix keeps a running aggregate (or a bounded
window) in the thread instead of every tensor.
"""
import queue
import threading

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "predictions", "top": 1}


def metrics_worker(inbox):
    predictions = []  # the leak: every step's predictions, kept for a report at the very end
    while (item := inbox.get()) is not None:
        predictions.append(item)
    return len(predictions)


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inbox = queue.Queue()
    worker = threading.Thread(target=metrics_worker, args=(inbox,), daemon=True)
    worker.start()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=128)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                inbox.put(logits.detach().softmax(-1))
                tracker.step()
    finally:
        inbox.put(None)
        worker.join()
