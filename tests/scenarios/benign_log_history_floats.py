"""A trainer's log history: every step a dict of Python floats (loss, learning rate, grad norm,
epoch, step) is appended to ``state.log_history`` and kept for the whole run, by design (it is
saved in ``trainer_state.json``). It grows every step but holds no tensor: a few hundred bytes a
step, not a leak of the model's memory.

Real case: the Hugging Face ``Trainer`` keeps every log in ``trainer.state.log_history``,
https://huggingface.co/openai/whisper-large-v3/discussions/91 ("you can find them in
Seq2SeqTrainer.state.log_history"); ``logging_steps=1`` logs each step. The values are taken with
``.item()`` / ``float()``, the LR from ``scheduler.get_last_lr()``.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class TrainerState:
    def __init__(self):
        self.log_history = []
        self.global_step = 0


def run(tracker_factory, steps=30):
    g = seed(64)
    model = MLP(hidden=128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps + 1)
    state = TrainerState()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            state.global_step += 1
            state.log_history.append({  # logging_steps=1: kept for the whole run
                "loss": round(loss.item(), 4),
                "grad_norm": float(grad_norm),
                "learning_rate": sched.get_last_lr()[0],
                "epoch": step / 10,
                "step": state.global_step,
            })
            tracker.step()
