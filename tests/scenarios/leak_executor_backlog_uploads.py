"""Each step's outputs are handed to a ThreadPoolExecutor that uploads them (to a metrics server,
to storage); the upload is slower than the step. ``submit()`` never blocks: the executor's work
queue has no bound, so the tasks not yet run pile up, each keeping its tensor.

Real case: hpcaitech/EnergonAI https://github.com/hpcaitech/EnergonAI/pull/91 ("ThreadPool.submit()
is not blocking when reaching the max_worker number": the pipeline's batcher queued work without
bound); CPython's executors have no queue size (python/cpython#58327, "Ability to adjust queue size
in Executors"). The fix bounds the work in flight (wait for the oldest futures) or submits numbers.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "uploader._work_queue", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    network = threading.Event()  # the upload waits on the network, which stays slow for the whole run
    uploader = ThreadPoolExecutor(max_workers=1)

    def upload(preds):
        network.wait(30)
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
                uploader.submit(upload, logits.detach().softmax(-1))  # the leak: nothing bounds the backlog
                tracker.step()
    finally:
        network.set()
        uploader.shutdown(cancel_futures=True)
