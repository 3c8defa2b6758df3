"""A hand-written copy of an RLHF trainer's log-prob pass (Megatron-style ``forward_backward_func`` with
``forward_only=True``), as in GRPO/PPO trainers. Every rollout step the trainer recomputes the old
policy's per-token log-probs over the rollout in micro-batches, without grad. The step function is run
with ``collect_non_loss_data=True``, so for each micro-batch the schedule also appends the micro-batch's
full ``(batch, seq, vocab)`` logits to ``trainer.forward_data_store``; the caller only reads the gathered
log-probs, and the store is never cleared. Then a policy-gradient update runs on the rollout.

Real case: THUDM/slime https://github.com/THUDM/slime/pull/1506 ("fix compute logprobs memory leak bug:
when setting col_no_loss_data in forward, there will save logits in forward_only in each microbatch").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "forward_data_store", "top": 1}

VOCAB, SEQ = 256, 32


class TinyPolicy(nn.Module):
    def __init__(self, d=48):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.mix = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, ids):
        h = self.embed(ids)
        prefix = h.cumsum(1) / torch.arange(1, h.shape[1] + 1, device=h.device)[:, None]  # causal mean
        return self.head(torch.relu(self.mix(torch.cat([h, prefix], -1))))


class LogProbTrainer:
    def __init__(self, policy):
        self.policy = policy
        self.forward_data_store = []

    def forward_only(self, rollout, micro_batch=4, collect_non_loss_data=True):
        out = []
        with torch.no_grad():
            for mb in rollout.split(micro_batch):
                logits = self.policy(mb[:, :-1])
                if collect_non_loss_data:
                    self.forward_data_store.append(logits)  # the leak: never cleared
                out.append(logits.log_softmax(-1).gather(-1, mb[:, 1:, None]).squeeze(-1))
        return torch.cat(out)


def run(tracker_factory, steps=30):
    g = seed(856)
    policy = TinyPolicy()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-4)
    trainer = LogProbTrainer(policy)
    with tracker_factory(policy, optimizer=opt) as tracker:
        for _ in range(steps):
            rollout = torch.randint(0, VOCAB, (8, SEQ + 1), generator=g)
            rewards = torch.randn(8, generator=g)
            old_logp = trainer.forward_only(rollout)
            adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            logp = policy(rollout[:, :-1]).log_softmax(-1).gather(-1, rollout[:, 1:, None]).squeeze(-1)
            ratio = torch.exp(logp - old_logp)
            loss = -(torch.min(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
