"""A PPO-style trainer that switches to inference half-way through the run (the behaviour reached
its step budget, or the user froze it to evaluate): its policy stops updating, but the trainer
still receives every trajectory its agents produce and appends it (under ``torch.no_grad()``) to
``trainer.update_buffer``, which only ``_update_policy`` clears. While training, the buffer is a
sawtooth (filled for four steps, emptied by the update); once frozen, it grows by one trajectory
batch a step for the rest of the run: a bounded shape that turns into a leak part-way through, in
the same container.

Real case: Unity-Technologies/ml-agents https://github.com/Unity-Technologies/ml-agents/issues/1817
("Memory leak in Inference mode": "While training this behavior does not happen"), fixed by
https://github.com/Unity-Technologies/ml-agents/pull/2722 ("We don't clear the update buffer if we
don't update the policy. This fixes that").
"""
import torch
from torch import nn

from ._common import seed
from .leak_selfplay_trainer_after_budget import AGENTS, OBS, Trainer, make_policy

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "update_buffer", "top": 1}


def run(tracker_factory, steps=60):
    g = seed(1817)
    policy = make_policy()
    trainer = Trainer(policy, max_steps=steps // 2, update_every=4)
    with tracker_factory(policy, optimizer=trainer.opt) as tracker:
        for step in range(steps):
            trainer.process_trajectory(torch.randn(AGENTS, OBS, generator=g), g)
            trainer.advance()
            tracker.step()
