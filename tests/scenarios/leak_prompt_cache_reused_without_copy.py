"""A serving loop that pre-fills the KV cache of a long system prompt once (``prompt_cache``) and
passes it to ``generate`` for every request so that the system prompt is not re-encoded. transformers'
``DynamicCache`` is mutable: ``generate`` appends each request's suffix and generated tokens to the
cache it is handed (``torch.cat`` on every layer's keys and values). Passed without
``copy.deepcopy``, the one shared cache takes every request's tokens: its tensors are replaced by
longer ones each request, so the number of tensors stays the same while their size grows (and the
answers go wrong too, since every request attends to all earlier ones). Runs under
``torch.inference_mode()``: no graph, only keys and values.

Real case: huggingface/transformers https://github.com/huggingface/transformers/pull/32159 (re-using
a prompt / system prompt cache: ``past_key_values = copy.deepcopy(prompt_cache)`` before each
``generate``, "We can't copy the cache ... This renders us unable to re-use prompts"), and the
copy-on-fetch of the prompt cache in ml-explore/mlx-lm https://github.com/ml-explore/mlx-lm/pull/1483
("KVCache.update_and_fetch writes new tokens ... in place ... the deep copy is load-bearing").
"""
import torch

from ._common import seed
from ._prompt_cache_model import CausalLM, DynamicCache

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "prompt_cache", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(32159)
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
                past_key_values = prompt_cache  # the leak: should be copy.deepcopy(prompt_cache)
                model.generate(request, past_key_values, max_new_tokens=8)
            tracker.step()
