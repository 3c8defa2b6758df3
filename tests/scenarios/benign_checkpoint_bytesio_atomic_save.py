"""A checkpoint of the model, the optimizer and the loop state written every few steps the way
Lightning's ``_atomic_save`` does it: ``torch.save`` into an ``io.BytesIO`` first, then the bytes
written to a temporary file that replaces the checkpoint. The buffer holds a full serialized copy
of the state (a few MiB with Adam's moments) while the save runs and is dropped when it returns, so
memory spikes at each save and comes back; the file on disk is overwritten in place.

Real case: Lightning-AI/pytorch-lightning https://github.com/Lightning-AI/pytorch-lightning/issues/21823
("_atomic_save ... serializes every checkpoint into an in-memory io.BytesIO buffer via torch.save,
then writes that buffer's bytes out") and google/orbax https://github.com/google/orbax/issues/1713
("Each checkpoint saving increases CPU memory usage", closed: "After a few thousand steps, memory
usage stops growing").
"""

import io
import os
import tempfile

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SAVE_EVERY = 4


def atomic_save(checkpoint, path):
    buf = io.BytesIO()
    torch.save(checkpoint, buf)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def run(tracker_factory, steps=30):
    g = seed(5708)
    model = MLP(hidden=512)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "last.ckpt")
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % SAVE_EVERY == SAVE_EVERY - 1:
                    atomic_save(
                        {
                            "state_dict": model.state_dict(),
                            "optimizer_states": [opt.state_dict()],
                            "global_step": step,
                            "loss": loss.item(),
                        },
                        path,
                    )
                tracker.step()
