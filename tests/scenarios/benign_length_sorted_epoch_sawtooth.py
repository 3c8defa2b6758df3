"""A sequence model trained on length-bucketed batches that go from the shortest to the longest
within each epoch (an ascending sort, no shuffling of the buckets). What a step leaves alive until
the next one (its batch, logits and loss in loop variables) scales with the batch's length, so
memory climbs step after step through an epoch and falls back when the next epoch starts with the
shortest batch again: a sawtooth whose period is the epoch, bounded by the longest batch. Within an
epoch it looks exactly like steady growth.

Real case: rapidsai/crossfit https://github.com/rapidsai/crossfit/pull/18 ("the shorter sequences
come first and longer ones last ... memory allocation continues to grow"; fixed by batching longer
sequences first) and speechbrain/speechbrain https://github.com/speechbrain/speechbrain/issues/841
("every time you see a longer sentence, your VRAM consumption will increase ... This is also
expected if you have sorting=ascending").
"""

import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB = 200
LENGTHS = [16, 24, 32, 48, 64, 80, 96, 128]  # one epoch: buckets in ascending length


def run(tracker_factory, steps=32):
    g = seed(5706)
    model = TinyTransformer(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            length = LENGTHS[step % len(LENGTHS)]
            tokens = torch.randint(0, VOCAB, (48, length + 1), generator=g)
            inputs, targets = tokens[:, :-1], tokens[:, 1:]
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
