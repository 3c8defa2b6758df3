"""The twin of leak_thread_prefetcher_keeps_batches: the prefetch thread keeps the last four
batches it made in a deque(maxlen=4), a bounded window, and nothing more. Memory stays flat.

Real case: pytorch https://github.com/pytorch/pytorch/issues/64412, a loader thread whose memory
grew while the thread kept its tensors (a comment there reports no leak once the thread handed its
data over instead); this twin keeps a bounded window, which must read as no leak.
"""
import collections
import queue
import threading

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def prefetcher(out, stop, g):
    made = collections.deque(maxlen=4)  # bounded: the last four batches
    while not stop.is_set():
        x, y = batch(g, n=128)
        made.append(x)
        try:
            out.put((x, y), timeout=0.05)
        except queue.Full:
            pass


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
