"""Evaluation that keeps model outputs without ``torch.no_grad()``: every output keeps its graph.

Real case: the PyTorch FAQ (https://pytorch.org/docs/stable/notes/faq.html, "Don't hold onto
tensors and variables you don't need") and the torchmetrics report
https://github.com/Lightning-AI/torchmetrics/issues/1160 (validation outputs piling up).
No backward runs, so the activations autograd saved for each batch stay alive with ``preds``.
"""
from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "preds", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(2)
    model = MLP(hidden=128)
    model.eval()
    preds = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=64)
            out = model(x)          # the leak: no torch.no_grad() / inference_mode()
            preds.append(out.softmax(-1))
            tracker.step()
