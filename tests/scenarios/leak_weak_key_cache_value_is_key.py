"""An onload cache that is a ``weakref.WeakKeyDictionary``: activations are moved to the
execution device once and memoized, keyed weakly by the offloaded tensor. When the offload device
is the execution device, ``t.to(device)`` returns ``t`` itself: the value is the key, held
strongly by the dictionary, so the weak key never dies and every batch's activations stay.

Real case: llm-compressor https://github.com/vllm-project/llm-compressor/pull/2387 ("a
``WeakKeyDictionary`` layer which caches shared tensors ... if the value of entry is identical to
the key of the entry, then the key will never be garbage collected", with
``sequential_offload_device="cuda"``: very high CUDA memory in AWQ calibration).
"""
import weakref

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "onload_cache", "top": 1}

#: offloaded tensor (weakly) -> the same tensor on the execution device
onload_cache: "weakref.WeakKeyDictionary[torch.Tensor, torch.Tensor]" = weakref.WeakKeyDictionary()


def onload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    cached = onload_cache.get(t)
    if cached is None:
        cached = onload_cache[t] = t.to(device)  # the same device: `.to` returns `t`, the key
    return cached


def run(tracker_factory, steps=30):
    g = seed(41)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    device = next(model.parameters()).device  # activations are "offloaded" where they already are
    onload_cache.clear()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=48)
                with torch.no_grad():  # calibration: the first layer's activations, offloaded
                    acts = torch.relu(model.fc1(x))
                h = onload(acts, device)
                loss = nn.functional.cross_entropy(model.head(torch.relu(model.fc2(h))), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        onload_cache.clear()
