"""A learner that pushes a copy of the policy's parameters into a ``queue.Queue`` every step for an
actor to pick up; the actor takes one item now and then, so the queue (an unbounded FIFO) grows by
a full copy of the parameters at each step it does not drain.

Real case: LeRobot https://github.com/huggingface/lerobot/issues/1523 ("Sometimes the
``parameters_queue`` on the actor keep growing, and can consume all the RAM"; the fix drains the
queue and keeps only the last item).
"""
import queue

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "parameters_queue", "top": 1}


class Actor:
    def __init__(self, policy):
        self.policy = policy

    def maybe_update(self, parameters_queue, step):
        if step % 4 == 0 and not parameters_queue.empty():  # the leak: takes one item, not the last
            state = parameters_queue.get_nowait()
            self.policy.load_state_dict(state)


def run(tracker_factory, steps=30):
    g = seed(64)
    model = MLP(hidden=256)
    actor = Actor(MLP(hidden=256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    parameters_queue = queue.Queue()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            parameters_queue.put({k: v.detach().clone() for k, v in model.state_dict().items()})
            actor.maybe_update(parameters_queue, step)
            tracker.step()
