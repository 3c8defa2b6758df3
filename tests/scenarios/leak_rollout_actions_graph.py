"""An episode runner stores the policy's outputs in its replay buffer without ``detach()``: every
stored transition keeps the graph that produced its action.

Real case: pymarl https://github.com/oxwhirl/pymarl/pull/73 ("In EpisodeRunner, the ``actions``
should either be detached from the computation graph or be converted into a numpy array before
being stored into the replay buffer ... the entire computation graph for generating the action
isn't released"; "The CPU memory will grow linearly through time") and RLlib
https://github.com/ray-project/ray/issues/6962 (the policy's value function ran outside
``torch.no_grad()``; "adding ``with torch.no_grad()`` to ``def value``" fixed the leak). Here the rollout stores the action
probabilities (for importance weights later) in a ``deque`` with no ``maxlen``.
"""
from collections import deque

import torch

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "buffer.transitions", "top": 1}


class EpisodeBuffer:
    def __init__(self):
        self.transitions = deque()  # no maxlen: grows for the whole run

    def add(self, state, probs, reward):
        self.transitions.append((state, probs, reward))


def run(tracker_factory, steps=30):
    g = seed(43)
    policy = MLP(hidden=128, d_out=8)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    buffer = EpisodeBuffer()
    with tracker_factory(policy, optimizer=opt) as tracker:
        for _ in range(steps):
            state = torch.randn(64, DIM, generator=g)
            probs = torch.softmax(policy(state), -1)  # acting, outside torch.no_grad()
            action = torch.multinomial(probs, 1, generator=g).squeeze(1)
            reward = torch.randn(64, generator=g)
            buffer.add(state, probs, reward)  # the leak: probs not detached before storing
            # the update runs its own forward; the stored graphs are never backpropagated
            logp = torch.log_softmax(policy(state), -1).gather(1, action[:, None]).squeeze(1)
            loss = -(logp * reward).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
