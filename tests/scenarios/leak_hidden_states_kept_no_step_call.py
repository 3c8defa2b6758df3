"""Feature extraction that keeps every batch's ``hidden_states``, tracked with the model alone:
the loop never calls ``tracker.step()`` and has no optimizer, so each call of the model ends an
iteration.

Real case: https://github.com/huggingface/transformers/issues/24315 (DistilBERT used for
inference: "the issue happened with ``hidden_states_list.append(hidden_states)`` ... the GPU memory
accumulates for each batch"). An inference script wraps its loop in ``memleak.track(model)`` as it
stands, without adding step calls.
"""
import torch

from ._common import seed
from .leak_hidden_states_feature_list import Encoder  # the same encoder, tracked another way

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hidden_states_list", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(48)
    model = Encoder().eval()
    hidden_states_list = []
    with tracker_factory(model), torch.no_grad():
        for step in range(steps):
            tokens = torch.randint(0, 64, (16, 16), generator=g)
            _, hidden_states = model(tokens)
            hidden_states_list.append(hidden_states)  # the leak: every layer's activations, kept
