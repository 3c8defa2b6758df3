"""A hand-written copy of the Hugging Face ``Trainer`` evaluation loop (``prediction_loop`` of
transformers 3.x) on a causal LM whose forward returns ``(logits, past_key_values)``. Each eval step
appends the step's outputs to ``preds_host`` with ``nested_concat`` (a ``torch.cat`` along the batch
per nested tensor) and only moves the result off the device at the very end of the loop. Because the
model returns its cache, the ``past_key_values`` of every layer are gathered too, next to the full
``(batch, seq, vocab)`` logits: ``preds_host`` grows by a batch of logits plus a batch of keys and
values at every step, for the whole evaluation set.

Real case: "trainer.evaluate() aggregates predictions on GPU and causes CUDA out of memory issues for
large datasets" https://github.com/huggingface/transformers/issues/7232 (fixed by
``eval_accumulation_steps`` in https://github.com/huggingface/transformers/pull/7767), "Trainer
accumulates logits" https://github.com/huggingface/transformers/issues/12878, and
https://github.com/huggingface/transformers/pull/7542 ("Also excluded the past from those logits if
we have a model using past states").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "preds_host", "top": 1}

VOCAB, D, T = 200, 32, 16


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=VOCAB, d=D, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def forward(self, ids):
        h = self.embed(ids)
        past = []
        for qkv in self.qkv:
            q, k, v = qkv(h).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + self.mask, dim=-1)
            h = h + att @ v
            past.append((k, v))
        return self.head(h), tuple(past)  # (logits, past_key_values), as a model with use_cache=True


def nested_concat(a, b):
    """transformers.trainer_pt_utils.nested_concat, without the padding."""
    if isinstance(b, (list, tuple)):
        return type(b)(nested_concat(x, y) for x, y in zip(a, b))
    return torch.cat((a, b), dim=0)


def run(tracker_factory, steps=30):
    g = seed(311)
    model = TinyCausalLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.eval()
    preds_host = None
    labels_host = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):  # one eval batch a step
            ids = torch.randint(0, VOCAB, (8, T), generator=g)
            with torch.no_grad():
                logits = model(ids)  # the (logits, past_key_values) tuple, kept whole
            labels = ids
            preds_host = logits if preds_host is None else nested_concat(preds_host, logits)
            labels_host = labels if labels_host is None else nested_concat(labels_host, labels)
            tracker.step()
