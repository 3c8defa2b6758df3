"""The twin of leak_selfplay_trainer_after_budget with the ml-agents fix applied: when a
behaviour's trainer has reached its ``max_steps`` budget it still receives its agents'
trajectories, but it clears its ``update_buffer`` every step instead of keeping them. Memory is a
sawtooth (the buffer fills for four steps, then the policy update empties it) until the
``defender`` budget runs out, about 40% into the run; after that the defender's buffer holds at
most one trajectory batch. The phase change at the budget looks like something switching on, yet
nothing grows.

Real case: Unity-Technologies/ml-agents https://github.com/Unity-Technologies/ml-agents/pull/3422
("Clear update buffer when trainer isn't training to avoid memory leak").
"""
import torch
from torch import nn

from ._common import seed
from .leak_selfplay_trainer_after_budget import AGENTS, OBS, Trainer, make_policy

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class FixedTrainer(Trainer):
    def advance(self):
        if not self.should_still_train:
            for v in self.update_buffer.values():
                v.clear()
        else:
            super().advance()


def run(tracker_factory, steps=60):
    g = seed(903)
    striker, defender = make_policy(), make_policy()
    trainers = [FixedTrainer(striker, max_steps=10 ** 9, update_every=4),
                FixedTrainer(defender, max_steps=int(steps * 0.4), update_every=4)]
    model = nn.ModuleDict({"striker": striker, "defender": defender})
    with tracker_factory(model, optimizer=trainers[0].opt) as tracker:
        for step in range(steps):
            for t in trainers:
                t.process_trajectory(torch.randn(AGENTS, OBS, generator=g), g)
                t.advance()
            tracker.step()
