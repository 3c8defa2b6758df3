"""The fixed stateful-callback checkpoint code: at each save (every 10 steps) the trainer builds a
*new* list with the current state of each same-class callback and puts it in
``trainer_state.stateful_callbacks[name]``, replacing the last one. Each callback's history is a
``deque(maxlen=2048)`` of floats that fills during the first steps; each save makes fresh copies of
the histories (Python lists of floats), so the heap moves at every save, but one save's copies
replace the last ones: bounded.

Real case: the fix in huggingface/transformers https://github.com/huggingface/transformers/pull/33875
("To solve this problem, a new list is created with the updated callback states, instead of
appending them to the existing list").
"""
import io
import json
from collections import deque

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SAVE_STEPS = 10


class LossHistoryCallback:
    def __init__(self, key, keep=2048):
        self.key = key
        self.recent = deque(maxlen=keep)

    def on_step_end(self, per_sample):
        self.recent.extend(per_sample)

    def state(self):
        return {"args": {"key": self.key, "keep": self.recent.maxlen},
                "attributes": {"recent": list(self.recent)}}


class TrainerState:
    def __init__(self):
        self.global_step = 0
        self.stateful_callbacks = {}


def save_checkpoint(trainer_state, callbacks, model):
    states = {}
    for cb in callbacks:
        states.setdefault(type(cb).__name__, []).append(cb.state())
    for name, st in states.items():
        trainer_state.stateful_callbacks[name] = st if len(st) > 1 else st[0]
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    json.dumps({"global_step": trainer_state.global_step, "n": len(trainer_state.stateful_callbacks)})


def run(tracker_factory, steps=60):
    g = seed(5708)
    model = MLP(hidden=128)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    callbacks = [LossHistoryCallback("ce"), LossHistoryCallback("margin")]
    trainer_state = TrainerState()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            logits = model(x)
            per_sample = nn.functional.cross_entropy(logits, y, reduction="none")
            loss = per_sample.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            values = per_sample.detach().tolist()
            margins = (logits.detach().max(1).values - logits.detach().gather(1, y[:, None])[:, 0]).tolist()
            callbacks[0].on_step_end(values)
            callbacks[1].on_step_end(margins)
            trainer_state.global_step = step + 1
            if (step + 1) % SAVE_STEPS == 0:
                save_checkpoint(trainer_state, callbacks, model)
            tracker.step()
