"""A serving loop that pre-fills the KV cache of a long system prompt once (``prompt_cache``) and,
for every request, hands ``generate`` a ``copy.deepcopy`` of it, as transformers documents for
re-using a prompt cache. Each request's copy grows with its suffix and generated tokens (a new,
longer tensor per layer per token) and is dropped when the request ends; the shared prefix cache is
never touched. Memory climbs within a request and falls back: bounded by one request, however long
the server runs. Runs under ``torch.inference_mode()``.

Real case: huggingface/transformers https://github.com/huggingface/transformers/pull/32159 (the
prompt-reuse recipe: ``past_key_values = copy.deepcopy(prompt_cache)`` before each ``generate``),
and ml-explore/mlx-lm https://github.com/ml-explore/mlx-lm/issues/1395 (the prompt cache's deep copy
on fetch: a transient second copy, "doubling peak memory", freed after the request).
"""
import copy

import torch

from ._common import seed
from ._prompt_cache_model import CausalLM, DynamicCache

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(32160)
    model = CausalLM()
    model.eval()
    system_prompt = torch.randint(0, 96, (1, 64), generator=g)
    prompt_cache = DynamicCache()
    with torch.inference_mode():
        model(system_prompt, prompt_cache)
    with tracker_factory(model) as tracker:
        for step in range(steps):
            request = torch.randint(0, 96, (1, 24), generator=g)
            with torch.inference_mode():
                past_key_values = copy.deepcopy(prompt_cache)
                model.generate(request, past_key_values, max_new_tokens=8)
            del past_key_values
            tracker.step()
