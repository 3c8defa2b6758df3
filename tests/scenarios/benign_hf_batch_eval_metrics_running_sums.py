"""The bounded form of ``leak_hf_eval_preds_host_past_key_values``: the same hand-written Hugging Face
evaluation loop, but with ``batch_eval_metrics=True``. Instead of concatenating every batch's logits
into ``preds_host`` for a final ``compute_metrics``, the loop calls ``compute_metrics`` on each batch
(``compute_result=False``) and the metric object folds the batch into running sums (token count,
correct tokens, summed negative log-likelihood) held as 0-dim tensors updated in place. Nothing of a
batch outlives its step; memory is flat after the first batch.

Real case: https://github.com/huggingface/transformers/pull/28769 ("Trainer - add cache clearing and
the option for batched eval metrics computation": "storing all logits across the entire evaluation set
may not be feasible ... construct a compute_metrics function which can update average metrics at a
batch level"), the answer to https://github.com/huggingface/transformers/issues/12878.
"""
import torch
from torch import nn

from ._common import seed
from .leak_hf_eval_preds_host_past_key_values import VOCAB, T, TinyCausalLM

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class BatchedLMMetrics:
    def __init__(self):
        self.tokens = torch.zeros((), dtype=torch.long)
        self.correct = torch.zeros((), dtype=torch.long)
        self.nll = torch.zeros(())

    def __call__(self, logits, labels, compute_result=False):
        self.tokens += labels.numel()
        self.correct += (logits.argmax(-1) == labels).sum()
        self.nll += nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
        if compute_result:
            out = {"accuracy": float(self.correct) / float(self.tokens),
                   "ppl": float(torch.exp(self.nll / self.tokens))}
            self.__init__()
            return out
        return None


def run(tracker_factory, steps=30):
    g = seed(311)
    model = TinyCausalLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.eval()
    compute_metrics = BatchedLMMetrics()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):  # one eval batch a step
            ids = torch.randint(0, VOCAB, (8, T), generator=g)
            with torch.no_grad():
                logits, _past = model(ids)
            compute_metrics(logits, ids, compute_result=False)
            tracker.step()
    compute_metrics(logits, ids, compute_result=True)
