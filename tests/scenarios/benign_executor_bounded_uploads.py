"""The fix of ``leak_executor_backlog_uploads``: the same slow uploads through a ThreadPoolExecutor,
with the work in flight bounded: before submitting, the loop waits until fewer than two uploads
are pending, so the backlog never holds more than two steps' outputs.

Real case: the bounded form suggested for hpcaitech/EnergonAI
https://github.com/hpcaitech/EnergonAI/pull/91 and python/cpython#58327 (executors have no queue
size: bound the futures in flight yourself).
"""
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    uploader = ThreadPoolExecutor(max_workers=1)
    pending = set()

    def upload(preds):
        time.sleep(0.002)  # the network
        return preds.shape

    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=128)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                while len(pending) >= 2:  # the bound: at most two uploads in flight
                    _, pending = wait(pending, return_when=FIRST_COMPLETED)
                pending.add(uploader.submit(upload, logits.detach().softmax(-1)))
                tracker.step()
    finally:
        uploader.shutdown()
