"""A learner that sends the policy's parameters, serialized to bytes, to an actor process through a
``multiprocessing.Queue`` every step; the actor is busy with a long episode and reads none of them.
``put()`` hands each item to the queue's feeder thread, which writes it into a pipe of 64 KiB: the
first item fills the pipe, and every later one waits in this process (the queue's ``_buffer``).

Real case: LeRobot https://github.com/huggingface/lerobot/issues/1523 (the actor's parameters
queue "keep growing, and can consume all the RAM"; "Similar issue was reported for cases when the
queues are used with big items in https://bugs.python.org/issue23582"; the fix drains the queue
and keeps only the last item).
"""
import multiprocessing

import torch
from torch import nn

from ._common import MLP, batch, seed, state_to_bytes

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "parameters_queue", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(65)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    parameters_queue = multiprocessing.Queue()  # the actor process would get() from it
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            parameters_queue.put(state_to_bytes(model.state_dict()))  # the leak: ~330 KiB a step, never read
            tracker.step()
    for _ in range(steps):  # the actor's turn, after the run: the feeder thread sends the rest and ends
        parameters_queue.get(timeout=30)
    parameters_queue.close()
