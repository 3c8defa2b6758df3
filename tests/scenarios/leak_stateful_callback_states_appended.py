"""A hand-written copy of the Hugging Face ``Trainer`` checkpoint code for stateful callbacks. Two
instances of the same callback class (``LossHistoryCallback``, one per monitored loss, each keeping
its recent per-sample losses as floats) are exportable, and at every checkpoint save the trainer
records each callback's ``state()`` in ``trainer_state.stateful_callbacks[name]``. With two
callbacks of one class that entry is a list, and each save *appends* both callbacks' current states
to it instead of replacing them: the trainer state gains two full copies of each callback's history
(thousands of floats) at every save, every 10 steps, and never drops one. The growth is plain
Python data (dicts, lists and floats), no tensor.

Real case: huggingface/transformers https://github.com/huggingface/transformers/pull/33875 ("when
there are multiple stateful callbacks of the same class to be saved ... they are appended to the
same list (of all callbacks of that same class) every time a checkpoint is saved, causing it to
grow without limit").
"""
import io
import json
from collections import deque

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "stateful_callbacks", "top": 1}
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
    def __init__(self, callbacks):
        self.global_step = 0
        self.stateful_callbacks = {}
        for cb in callbacks:  # TrainerState.__post_init__: same-class callbacks go in a list
            name = type(cb).__name__
            if name in self.stateful_callbacks:
                if not isinstance(self.stateful_callbacks[name], list):
                    self.stateful_callbacks[name] = [self.stateful_callbacks[name]]
                self.stateful_callbacks[name].append(cb.state())
            else:
                self.stateful_callbacks[name] = cb.state()


def save_checkpoint(trainer_state, callbacks, model):
    for cb in callbacks:  # Trainer._save_checkpoint
        name = type(cb).__name__
        if isinstance(trainer_state.stateful_callbacks[name], list):
            trainer_state.stateful_callbacks[name].append(cb.state())  # the leak: rebuild the list
        else:
            trainer_state.stateful_callbacks[name] = cb.state()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    json.dumps({"global_step": trainer_state.global_step, "n": len(trainer_state.stateful_callbacks)})


def run(tracker_factory, steps=60):
    g = seed(5707)
    model = MLP(hidden=128)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    callbacks = [LossHistoryCallback("ce"), LossHistoryCallback("margin")]
    trainer_state = TrainerState(callbacks)
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
