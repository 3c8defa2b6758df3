"""Progressive resizing: the batch grows once, late in the run (a schedule step), and the model's
scratch buffer is reallocated to the new size; memory jumps at that step, then stays flat.

Real case: https://github.com/OUC-VAS/ForensicsAdapter/issues/18 (memory "gradually increases to
about 20G during training and then stabilizes"; the maintainers: "it is not a memory leak", the
design calls a larger component more over time, "a normal phenomenon of training"), and the rule of
thumb in https://codemia.io/knowledge-hub/path/keras_occupies_an_indefinitely_increasing_amount_of_memory_for_each_epoch
("A simple one-time jump that stays flat is usually allocation strategy, not a leak"). Here the
batch goes from 32 to 96 rows at step 18; a non-persistent buffer sized to the largest batch seen
(a mixing workspace) is replaced once, then reused.
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class MixNet(MLP):
    def __init__(self):
        super().__init__(hidden=128)
        self.register_buffer("workspace", torch.zeros(32, DIM), persistent=False)

    def forward(self, x):
        n = x.shape[0]
        if n > self.workspace.shape[0]:  # grown once, to the largest batch seen, then reused
            self.workspace = torch.zeros(n, DIM)
        ws = self.workspace[:n]
        ws.copy_(x.flip(0))
        return super().forward(0.9 * x + 0.1 * ws)


def run(tracker_factory, steps=30, grow_at=18):
    g = seed(44)
    model = MixNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=32 if step < grow_at else 96)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
