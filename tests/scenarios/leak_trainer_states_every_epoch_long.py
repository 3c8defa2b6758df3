"""A small ``Train`` helper (as in pinot's ``TrainAndTest``) records the network's weights after
every epoch in ``self.states`` (``states[epoch] = copy.deepcopy(net.state_dict())``) so that the
test phase can evaluate "all iterates" afterwards. Epochs here are eight steps long, so a 30-step
run sees three saves of a full copy of the model (about 300 KiB each): a three-stair staircase,
the same shape as a bounded keep-the-last-three checkpoint rotation early in its run, but the dict
is never pruned and grows by ``n_epochs x size(model)``.

Real case: choderalab/pinot https://github.com/choderalab/pinot/issues/23 ("Note that Train stores
all iterates in memory, in the ``states`` dictionary, so I'd expect this to use ``n_epochs`` x
``size(model)`` memory"; "Yes, the state dictionaries are all saved").
"""
import copy

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "states", "top": 1}
STEPS_PER_EPOCH = 8


class Train:
    def __init__(self, net, optimizer):
        self.net = net
        self.optimizer = optimizer
        self.states = {}

    def train_once(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def end_epoch(self, epoch):
        self.states[epoch] = copy.deepcopy(self.net.state_dict())  # the leak: every epoch kept


def run(tracker_factory, steps=30):
    g = seed(179)
    net = MLP(hidden=256)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    train = Train(net, opt)
    with tracker_factory(net, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            train.train_once(x, y)
            if (step + 1) % STEPS_PER_EPOCH == 0:
                train.end_epoch(step // STEPS_PER_EPOCH)
            tracker.step()
