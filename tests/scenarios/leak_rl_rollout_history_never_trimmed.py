"""A GRPO-style RL fine-tuning loop for a small language model with "history replay": every
rollout the policy produces (prompt token ids, completion token ids, the sampling log-probs and
the reward) goes into the buffer's ``rollout_history`` so that old rollouts can be replayed
later. The history is appended after every step and never trimmed: it holds every rollout of the
run (about 70 KiB of detached tensors a step here) and grows until the process runs out of memory.

Real case: PrimeIntellect-ai/prime-rl https://github.com/PrimeIntellect-ai/prime-rl/pull/1936
(review of "History replay": "``rollout_history`` grows without bound — every rollout produced
during training is appended and never trimmed. Each rollout contains full trajectory data
(prompts, completions, token IDs, logprobs)").
"""
import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "rollout_history", "top": 1}


class Buffer:
    def __init__(self):
        self.rollout_history = []

    def add(self, rollouts):
        self.rollout_history.extend(rollouts)  # the leak: never trimmed

    def replay(self, k, g):
        if len(self.rollout_history) < k:
            return []
        idx = torch.randint(0, len(self.rollout_history), (k,), generator=g).tolist()
        return [self.rollout_history[i] for i in idx]


def run(tracker_factory, steps=30):
    g = seed(4107)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    buffer = Buffer()
    P, C, B = 32, 48, 64
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
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
            buffer.add([{"prompt_ids": prompts[i].clone(), "completion_ids": completions[i].clone(),
                         "logprobs": old_logp[i].clone(), "reward": float(rewards[i])} for i in range(B)])
            buffer.replay(8, g)
            tracker.step()
