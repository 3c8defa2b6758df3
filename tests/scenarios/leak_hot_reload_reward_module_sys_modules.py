"""The training loop hot-reloads a user-editable reward/weighting module every step so that edits
take effect without a restart. To dodge the import cache it loads the file under a fresh name each
time (``reward_fn_<step>``) with ``importlib.util.spec_from_file_location`` and, so that pickling
and dataclasses inside the module work, registers it in ``sys.modules`` before executing it, as
the importlib recipe does. Nothing ever removes the old names: each load strands a module whose
globals hold the module's lookup table (a tensor), and ``sys.modules`` lives as long as the
interpreter.

Real case: PolicyEngine/policyengine-core https://github.com/PolicyEngine/policyengine-core/issues/520
(modules registered "under a name unique to the *system instance*", "``sys.modules`` is
process-immortal, so each constructed system strands one full set of variable-module objects —
with all their module-level globals"), numenta/nupic-legacy
https://github.com/numenta/nupic-legacy/issues/332 ("opfhelpers leaks module imports": one
``pf_description<N>`` entry in ``sys.modules`` per load) and PrefectHQ/prefect
https://github.com/PrefectHQ/prefect/pull/21692 ("stop leaking ``sys.modules`` entries in
``load_script_as_module``").
"""
import importlib.util
import os
import sys
import tempfile

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "sys.modules", "top": 1}

REWARD_SOURCE = '''
import torch

# per-class, per-confidence-bin weights (edited by hand between runs)
WEIGHTS = torch.linspace(0.5, 2.0, 4 * 4096).view(4, 4096)


def sample_weights(logits, y):
    conf = logits.softmax(-1).max(-1).values
    bins = (conf * 4095).long().clamp(0, 4095)
    return WEIGHTS[y, bins]
'''


def load_reward(path, step):
    name = f"reward_fn_{step}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # the leak: a new name every step, never removed
    spec.loader.exec_module(mod)
    return mod


def run(tracker_factory, steps=30):
    g = seed(3109)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fd, path = tempfile.mkstemp(suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(REWARD_SOURCE)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                reward = load_reward(path, step)
                x, y = batch(g, n=128)
                logits = model(x)
                w = reward.sample_weights(logits.detach(), y)
                loss = (nn.functional.cross_entropy(logits, y, reduction="none") * w).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        os.unlink(path)
        for name in [n for n in sys.modules if n.startswith("reward_fn_")]:
            del sys.modules[name]
