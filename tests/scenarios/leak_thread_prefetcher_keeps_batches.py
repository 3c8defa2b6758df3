"""A background prefetch thread: it makes each batch, hands it to the loop through a bounded queue,
and keeps every batch it made in a local list (a debugging aid left in). The tensors are made in
the thread, where memleak does not tag creation sites, and the list lives in the thread's running
frame, which it does not read: only a scan of the live tensors the walk did not reach finds them.

Real case: pytorch https://github.com/pytorch/pytorch/issues/64412 ("custom dataloader with
threads and image transforms ... memory usage slowly grows over the epoch leading to OOM";
gc.get_objects() "shows growing list of tensors of the shape of images and labels", made in the
thread). The fix keeps nothing in the thread beyond what the queue holds, or a bounded window.
"""
import queue
import threading

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "made", "top": 1}


def prefetcher(out, stop, g):
    made = []  # the leak: every batch this thread made
    while not stop.is_set():
        x, y = batch(g, n=128)
        made.append(x)
        try:
            out.put((x, y), timeout=0.05)
        except queue.Full:
            made.pop()


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ready, stop = queue.Queue(maxsize=2), threading.Event()
    worker = threading.Thread(target=prefetcher, args=(ready, stop, g), daemon=True)
    worker.start()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = ready.get(timeout=30)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        stop.set()
        worker.join()
