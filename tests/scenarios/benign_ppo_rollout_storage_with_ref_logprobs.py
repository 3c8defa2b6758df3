"""An RLHF PPO loop with a frozen reference model: each step generates responses for a batch of
queries with the policy (no grad), scores the log-probs of the response tokens under the policy and
under the reference model and the values (no grad), and appends them to ``trainer.rollouts``. Every
``ROLLOUT_BATCHES`` steps the trainer runs its PPO epochs over the stored rollouts (the KL penalty
against the reference log-probs in the reward) and clears the storage. Only the per-token log-probs
and values are stored, not the ``(batch, seq, vocab)`` logits. The storage fills for four steps and is
emptied on the fifth: a sawtooth, flat from update to update.

Real case: huggingface/trl https://github.com/huggingface/trl/pull/234 ("Reduce memory consumption in
batched_forward_pass of PPOTrainer, by avoiding the storage of logits when they are not necessary"),
the ``batched_forward_pass`` that computes the policy and reference log-probs and values of the
rollouts that ``PPOTrainer.step`` then trains on.
"""
import copy

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

VOCAB, D, Q, R, B, ROLLOUT_BATCHES, PPO_EPOCHS = 128, 64, 16, 24, 32, 5, 2


class PolicyWithValueHead(nn.Module):
    def __init__(self, vocab=VOCAB, d=D):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.lm_head = nn.Linear(d, vocab)
        self.v_head = nn.Linear(d, 1)

    def forward(self, ids):
        h, _ = self.rnn(self.embed(ids))
        return self.lm_head(h), self.v_head(h).squeeze(-1)


def logprobs_of(logits, ids):
    return logits[:, :-1].log_softmax(-1).gather(2, ids[:, 1:, None]).squeeze(2)[:, Q - 1:]


class PPOTrainerCopy:
    def __init__(self, model, ref_model, opt, kl_coef=0.05, clip=0.2):
        self.model, self.ref_model, self.opt = model, ref_model, opt
        self.kl_coef, self.clip = kl_coef, clip
        self.rollouts = []

    @torch.no_grad()
    def rollout(self, queries, g):
        ids = queries
        for _ in range(R):
            logits, _ = self.model(ids)
            nxt = torch.multinomial(logits[:, -1].softmax(-1), 1, generator=g)
            ids = torch.cat([ids, nxt], 1)
        logits, values = self.model(ids)
        ref_logits, _ = self.ref_model(ids)
        self.rollouts.append({
            "ids": ids,
            "logprobs": logprobs_of(logits, ids),
            "ref_logprobs": logprobs_of(ref_logits, ids),
            "values": values[:, Q - 1:-1],
            "score": (ids[:, Q:] % 7 == 0).float().mean(1),  # the reward model, a rule here
        })

    def step(self):
        for _ in range(PPO_EPOCHS):
            for r in self.rollouts:
                kl = r["logprobs"] - r["ref_logprobs"]
                rewards = -self.kl_coef * kl
                rewards[:, -1] += r["score"]
                returns = rewards.flip(1).cumsum(1).flip(1)
                adv = returns - r["values"]
                logits, values = self.model(r["ids"])
                ratio = (logprobs_of(logits, r["ids"]) - r["logprobs"]).exp()
                pg = -torch.min(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv).mean()
                vf = (values[:, Q - 1:-1] - returns).pow(2).mean()
                self.opt.zero_grad()
                (pg + 0.1 * vf).backward()
                self.opt.step()
        self.rollouts.clear()


def run(tracker_factory, steps=30):
    g = seed(234)
    model = PolicyWithValueHead()
    ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    trainer = PPOTrainerCopy(model, ref_model, opt)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            trainer.rollout(torch.randint(0, VOCAB, (B, Q), generator=g), g)
            if (step + 1) % ROLLOUT_BATCHES == 0:
                trainer.step()
            tracker.step()
