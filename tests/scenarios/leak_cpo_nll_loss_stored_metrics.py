"""A hand-written copy of TRL's ``CPOTrainer`` (trl 0.8.x) on a tiny causal LM. Each step computes the
CPO preference loss on a batch of (chosen, rejected) pairs plus the NLL loss on the chosen answers, and
``get_batch_loss_metrics`` builds the step's metrics dict that ``store_metrics`` appends to
``self._stored_metrics[train_eval][key]`` (a ``defaultdict(lambda: defaultdict(list))``) until the next
``log()`` call averages and drops them (every ``logging_steps``, 500 by default). The rewards, log-probs
and logits are stored ``.detach().cpu()``, but the NLL loss is stored as ``policy_nll_loss.cpu().mean()``:
no ``detach``, so each stored value keeps the whole step's autograd graph (the chosen/rejected logits,
the log-softmax and every saved activation) alive until the next log, hundreds of steps later.

Real case: huggingface/trl https://github.com/huggingface/trl/issues/1526 ("a bug which leads to
'Cuda: Out of memory' in CPOTrainer ... caused by missing the 'detach' in line 741:
``metrics[f"{prefix}nll_loss"] = policy_nll_loss.cpu().mean()``"), fixed in
https://github.com/huggingface/trl/pull/1531 ("[CPO] fix memory leak due to retained value").
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "_stored_metrics", "top": 1}

VOCAB, D, T, PAIRS = 512, 64, 32, 8


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=VOCAB, d=D):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        return self.head(h + self.mlp(h))


class CPOTrainerCopy:
    def __init__(self, model, optimizer, beta=0.1, logging_steps=500):
        self.model, self.optimizer = model, optimizer
        self.beta, self.logging_steps = beta, logging_steps
        self._stored_metrics = defaultdict(lambda: defaultdict(list))
        self.state_step = 0

    @staticmethod
    def get_batch_logps(logits, labels):
        logp = logits[:, :-1].log_softmax(-1)
        return logp.gather(2, labels[:, 1:, None]).squeeze(2).sum(-1)

    def concatenated_forward(self, chosen, rejected):
        logits = self.model(torch.cat([chosen, rejected]))
        logps = self.get_batch_logps(logits, torch.cat([chosen, rejected]))
        n = chosen.shape[0]
        nll = nn.functional.cross_entropy(
            logits[:n, :-1].reshape(-1, logits.shape[-1]), chosen[:, 1:].reshape(-1))
        return logps[:n], logps[n:], logits[:n], logits[n:], nll

    def get_batch_loss_metrics(self, chosen, rejected, train_eval="train"):
        metrics = {}
        c_logps, r_logps, c_logits, r_logits, policy_nll_loss = self.concatenated_forward(chosen, rejected)
        losses = -nn.functional.logsigmoid(self.beta * (c_logps - r_logps))
        loss = losses.mean() + policy_nll_loss
        c_rewards = self.beta * c_logps.detach()
        r_rewards = self.beta * r_logps.detach()
        prefix = "eval_" if train_eval == "eval" else ""
        metrics[f"{prefix}rewards/chosen"] = c_rewards.mean().cpu()
        metrics[f"{prefix}rewards/rejected"] = r_rewards.mean().cpu()
        metrics[f"{prefix}rewards/accuracies"] = (c_rewards > r_rewards).float().mean().cpu()
        metrics[f"{prefix}logps/chosen"] = c_logps.detach().mean().cpu()
        metrics[f"{prefix}logits/chosen"] = c_logits.detach().mean().cpu()
        metrics[f"{prefix}logits/rejected"] = r_logits.detach().mean().cpu()
        metrics[f"{prefix}nll_loss"] = policy_nll_loss.cpu().mean()  # the leak: no .detach()
        return loss, metrics

    def store_metrics(self, metrics, train_eval="train"):
        for key, value in metrics.items():
            self._stored_metrics[train_eval][key].append(value)

    def log(self, train_eval="train"):
        logs = {k: torch.tensor(v).mean().item() for k, v in self._stored_metrics[train_eval].items()}
        del self._stored_metrics[train_eval]
        return logs

    def training_step(self, chosen, rejected):
        loss, metrics = self.get_batch_loss_metrics(chosen, rejected)
        self.store_metrics(metrics)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.state_step += 1
        if self.state_step % self.logging_steps == 0:
            self.log()
        return loss.detach()


def run(tracker_factory, steps=30):
    g = seed(1526)
    model = TinyCausalLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    trainer = CPOTrainerCopy(model, opt)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            chosen = torch.randint(0, VOCAB, (PAIRS, T), generator=g)
            rejected = torch.randint(0, VOCAB, (PAIRS, T), generator=g)
            trainer.training_step(chosen, rejected)
            tracker.step()
