"""A GRPO-style RL fine-tuning loop with "history replay" done the bounded way: rollouts (prompt
and completion token ids, sampling log-probs, reward) are kept in ``rollout_history``, a dict
keyed by the step that produced them, and each step drops the rollouts older than the replay
window (four steps) before adding its own. The history is written every step and looks like a
growing trajectory log, but it never holds more than four steps of rollouts.

Real case: PrimeIntellect-ai/prime-rl https://github.com/PrimeIntellect-ai/prime-rl/pull/1936
(review of "History replay": "``rollout_history`` grows without bound — every rollout produced
during training is appended and never trimmed"); this is the trimmed version.
"""
import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

WINDOW = 4


def run(tracker_factory, steps=30):
    g = seed(4108)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    rollout_history = {}
    P, C, B = 32, 48, 64
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            prompts = torch.randint(0, 50, (B, P), generator=g)
            with torch.no_grad():
                completions = torch.randint(0, 50, (B, C), generator=g)  # stands in for sampling
                tokens = torch.cat([prompts, completions], 1)
                old_logp = model(tokens[:, :-1]).log_softmax(-1)[:, P - 1:].gather(-1, completions[..., None])[..., 0]
            rewards = torch.rand(B, generator=g)
            adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            logp = model(tokens[:, :-1]).log_softmax(-1)[:, P - 1:].gather(-1, completions[..., None])[..., 0]
            ratio = (logp - old_logp).exp()
            loss = -(torch.minimum(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            for old in [s for s in rollout_history if s <= step - WINDOW]:
                del rollout_history[old]
            rollout_history[step] = [{"prompt_ids": prompts[i].clone(), "completion_ids": completions[i].clone(),
                                      "logprobs": old_logp[i].clone(), "reward": float(rewards[i])} for i in range(B)]
            tracker.step()
