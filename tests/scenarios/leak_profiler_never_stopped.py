"""A training recipe that starts ``torch.profiler`` and never stops it: the profiler keeps an event
for every operator (here with shapes and memory) in host memory for as long as it records, so host
memory grows every step, and no variable reaches what grows.

Real case: meta-pytorch/torchtune https://github.com/meta-pytorch/torchtune/pull/2522 ("the
profiler kept running and recording stats, in some cases eventually running out of CPU memory": a
``return`` skipped ``self._profiler.stop()``); Lightning-AI/pytorch-lightning #10717 and #11480
(``profiler="pytorch"``: RAM grows until the OOM killer stops the run,
https://github.com/Lightning-AI/pytorch-lightning/issues/10717).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "profiler", "location": "torch.profiler", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, profile_memory=True
    )
    prof.start()  # the leak: no prof.stop() on this path
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        prof.stop()
