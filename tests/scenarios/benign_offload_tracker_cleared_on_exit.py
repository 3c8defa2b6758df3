"""An activation-offloading context in the style of TRL's ``OffloadActivations`` with its fix: the
pack hook stashes a host copy of each saved tensor in ``self.tracker[tensor_id]``, the unpack hook
reads it back *without* popping (so a second backward or a re-entrant checkpoint could read it
again), and ``__exit__`` clears the tracker and resets the id counter once backward has run inside
the context. The tracker swells to hundreds of entries during every step (one per saved
activation, including a softmax branch that backward never reads) and is empty between steps.

Real case: huggingface/trl https://github.com/huggingface/trl/pull/5730 (``self.tracker.clear()``,
``self.tensor_id = 0`` in ``OffloadActivations.__exit__``: "Must run even if stream sync raises,
otherwise buffers leak permanently"; the internal trainers run backward inside the ``with`` block)
and https://github.com/huggingface/trl/pull/5700.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ActivationOffloader:
    def __init__(self):
        self.tracker = {}
        self.tensor_id = 0
        self.hooks = None

    def pack(self, x):
        self.tensor_id += 1
        self.tracker[self.tensor_id] = (x.device, x.detach().to("cpu", copy=True))
        return self.tensor_id

    def unpack(self, tid):
        device, t = self.tracker[tid]
        return t.to(device)

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.hooks.__exit__(*exc)
        finally:
            self.tracker.clear()
            self.tensor_id = 0


class Classifier(nn.Module):
    def __init__(self, hidden=256, classes=64):
        super().__init__()
        self.fc1 = nn.Linear(DIM, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
        logits = self.head(h)
        return logits, logits.softmax(-1)


def run(tracker_factory, steps=30):
    g = seed(5603)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    offloader = ActivationOffloader()
    confidences = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=256)
            y = torch.randint(0, 64, (256,), generator=g)
            with offloader:
                logits, probs = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
            opt.step()
            confidences.append(probs.max(-1).values.mean().item())
            tracker.step()
