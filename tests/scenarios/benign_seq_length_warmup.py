"""Sequence-length warmup: the sequence length grows from a short minimum to the maximum in small
stages over the first part of training, then stays at the maximum. Activation memory climbs in a
staircase for many steps (each stage a little more), then is flat for the rest of the run.

Real case: Composer's ``SeqLengthWarmup``,
https://docs.mosaicml.com/projects/composer/en/stable/api_reference/generated/composer.algorithms.SeqLengthWarmup.html
("The sequence length increases from min_seq_length to max_seq_length in steps of step_size during
the first duration fraction of training. The sequence length is then kept at max_seq_length for
the rest of training"; its default duration is 0.3). Here a one-layer transformer, 8 to 64 tokens in
steps of 8 over the first 30 % of the run.
"""
import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
MIN_LEN, MAX_LEN, STEP = 8, 64, 8


def seq_len_at(step, warmup):
    if step >= warmup:
        return MAX_LEN
    n = MIN_LEN + (MAX_LEN - MIN_LEN) * step / warmup
    return max(MIN_LEN, int(n) // STEP * STEP)


def run(tracker_factory, steps=30, duration=0.3):
    g = seed(63)
    model = TinyTransformer(vocab=50, layers=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup = max(int(steps * duration), 1)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            tokens = torch.randint(0, 50, (8, MAX_LEN + 1), generator=g)
            n = seq_len_at(step, warmup)
            tokens = tokens[:, :n + 1]  # truncate=True
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
