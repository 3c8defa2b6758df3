"""A hand-written Hugging Face ``Trainer`` that trains a small causal LM and, every 10 steps
(``eval_strategy="steps"``, ``eval_steps=10``), runs ``evaluate()``. Inside ``evaluation_loop`` the
predictions of the 12 eval batches (the logits and, as the model returns its cache, the
``past_key_values``) are concatenated into ``preds_host`` with ``nested_concat``, about 2 MB in all, and
passed to ``compute_metrics``; but ``preds_host`` is a local of the evaluation loop, dropped when
``evaluate()`` returns. Memory spikes during each evaluation and falls back to the same level: the
accumulation is bounded by one evaluation set, not a leak across training steps.

Real case: the accumulation reported in https://github.com/huggingface/transformers/issues/7232 and
https://github.com/huggingface/transformers/issues/12878 lives only for one ``evaluate()`` call (a
memory peak, which ``eval_accumulation_steps`` from https://github.com/huggingface/transformers/pull/7767
moves off the device), not across the training run.
"""
import torch
from torch import nn

from ._common import seed
from .leak_hf_eval_preds_host_past_key_values import VOCAB, T, TinyCausalLM, nested_concat

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Trainer:
    def __init__(self, model, opt, g, eval_steps=10, eval_batches=12):
        self.model, self.opt, self.g = model, opt, g
        self.eval_steps, self.eval_batches = eval_steps, eval_batches
        self.log_history = []

    def evaluation_loop(self):
        self.model.eval()
        preds_host = labels_host = None
        with torch.no_grad():
            for _ in range(self.eval_batches):
                ids = torch.randint(0, VOCAB, (8, T), generator=self.g)
                logits = self.model(ids)
                preds_host = logits if preds_host is None else nested_concat(preds_host, logits)
                labels_host = ids if labels_host is None else nested_concat(labels_host, ids)
        self.model.train()
        acc = (preds_host[0].argmax(-1) == labels_host).float().mean()  # compute_metrics
        return {"eval_accuracy": float(acc)}

    def train(self, steps, tracker):
        for step in range(steps):
            ids = torch.randint(0, VOCAB, (8, T), generator=self.g)
            logits, _past = self.model(ids)
            loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.log_history.append({"loss": float(loss), "step": step})
            if (step + 1) % self.eval_steps == 0:
                self.log_history.append(self.evaluation_loop())
            tracker.step()


def run(tracker_factory, steps=30):
    g = seed(312)
    model = TinyCausalLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer = Trainer(model, opt, g)
    with tracker_factory(model, optimizer=opt) as tracker:
        trainer.train(steps, tracker)
