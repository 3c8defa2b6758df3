"""Hyper-parameter search with an Optuna-style in-memory study: to get the best model back
without retraining, each trial's objective stores its trained model (and its optimizer, to resume
from) with ``trial.set_user_attr("model", model)``. The in-memory storage keeps every trial it ran,
with its user attributes, for ``study.trials`` and ``study.best_trial``: every finished trial's
weights and Adam moments stay alive, not only the best one's. Growth comes in steps, one model
plus its Adam state per trial (every 4 training steps).

Real case: optuna/optuna https://github.com/optuna/optuna/issues/5183 ("user attribute keep
best": with ``trial.set_user_attr(key="best_booster", value=gbm)`` "The purpose is not to save an
object in memory for every trial"), after https://github.com/optuna/optuna/issues/4324 (storing
the model returned from each tuning run; answer: "I guess ``trial.set_user_attr`` is what you want").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "user_attrs", "top": 1}
TRIAL_STEPS = 4


class FrozenTrial:
    def __init__(self, number, params):
        self.number = number
        self.params = params
        self.value = None
        self.user_attrs = {}


class InMemoryStorage:
    def __init__(self):
        self._trials = []

    def create_trial(self, params):
        self._trials.append(FrozenTrial(len(self._trials), params))
        return len(self._trials) - 1

    def set_trial_user_attr(self, trial_id, key, value):
        self._trials[trial_id].user_attrs[key] = value

    def set_trial_value(self, trial_id, value):
        self._trials[trial_id].value = value


class Trial:
    def __init__(self, study, params):
        self.study = study
        self.params = params
        self._trial_id = study._storage.create_trial(params)

    def set_user_attr(self, key, value):
        self.study._storage.set_trial_user_attr(self._trial_id, key, value)


class Study:
    def __init__(self):
        self._storage = InMemoryStorage()

    def ask(self, number):
        return Trial(self, {"lr": [1e-3, 3e-4, 3e-3, 1e-4][number % 4], "hidden": 256})


def make_model(hidden):
    return nn.Sequential(nn.Linear(DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 4))


def run(tracker_factory, steps=30):
    g = seed(5713)
    study = Study()
    trial = study.ask(0)
    model = make_model(trial.params["hidden"])
    opt = torch.optim.Adam(model.parameters(), lr=trial.params["lr"])
    val_loss = 0.0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step and step % TRIAL_STEPS == 0:  # the trial ends: report it, start the next one
                study._storage.set_trial_value(trial._trial_id, val_loss)
                trial.set_user_attr("model", model)  # the leak: every trial's model stays in storage
                trial.set_user_attr("optimizer", opt)
                trial = study.ask(step // TRIAL_STEPS)
                model = make_model(trial.params["hidden"])
                opt = torch.optim.Adam(model.parameters(), lr=trial.params["lr"])
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            val_loss = loss.item()
            tracker.step()
