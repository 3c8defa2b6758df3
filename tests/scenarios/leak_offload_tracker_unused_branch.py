"""An activation-offloading context in the style of TRL's ``OffloadActivations``: an object that
enters ``saved_tensors_hooks`` around the forward, whose pack hook copies each saved tensor to the
host into ``self.tracker[tensor_id]`` and returns the id, and whose unpack hook pops the entry and
hands the tensor back. Entries are dropped only when backward unpacks them. The model's forward
also returns class probabilities (``logits.softmax(-1)``, used for an accuracy/confidence log):
softmax saves its output, the pack hook stashes it, but the loss never goes through that branch, so
backward never unpacks it. The probabilities' graph dies with the step, yet the tracker keeps the
stashed copy: one entry per step, never popped, the whole run.

Real case: huggingface/trl "prevent 5 GB+ CUDA memory leak in activation offloading by syncing
streams and clear stashes in OffloadActivations.__exit__"
https://github.com/huggingface/trl/pull/5700 and "release ... stale state in OffloadActivations"
https://github.com/huggingface/trl/pull/5730 (``self.tracker.clear()`` added in ``__exit__``
because entries left in the tracker leaked permanently).
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "tracker", "top": 1}


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
        device, t = self.tracker.pop(tid)
        return t.to(device)

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)  # the leak: stale entries are never cleared here


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
    g = seed(5602)
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
