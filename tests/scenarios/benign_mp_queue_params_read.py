"""The learner of ``leak_mp_queue_params_unread`` with a reader that keeps up: each step's
parameters, serialized to bytes and put on a ``multiprocessing.Queue``, are taken off by the actor
(here in this process, as the actor's process would) before the next step, and loaded. The queue's
buffer holds one item at most; nothing grows.

Real case: the fix in LeRobot https://github.com/huggingface/lerobot/issues/1523 (drain the
parameters queue so that the actor keeps only the latest item).
"""
import io
import multiprocessing

import torch
from torch import nn

from ._common import MLP, batch, seed, state_to_bytes

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(66)
    model = MLP(hidden=256)
    actor = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    parameters_queue = multiprocessing.Queue()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            parameters_queue.put(state_to_bytes(model.state_dict()))
            latest = parameters_queue.get(timeout=30)  # the actor takes each one off as it comes
            actor.load_state_dict(torch.load(io.BytesIO(latest)))
            tracker.step()
    parameters_queue.close()
