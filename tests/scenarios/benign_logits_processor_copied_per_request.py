"""Structured (regex-guided) generation in a serving loop, done the fixed way: the generator keeps one
template ``RegexLogitsProcessor`` and hands each request a ``copy.copy`` of it with a fresh
``_fsm_state`` dict. During a request the dict gains one entry per generated token of every sequence
(keyed on the hash of the token prefix), so host memory climbs token by token; when the request
ends its copy, and the dict with it, is dropped. Bounded by one request's tokens.

Real case: dottxt-ai/outlines https://github.com/dottxt-ai/outlines/pull/1160 ("Don't re-use logits
processors in SequenceGeneratorAdapter, copy them": "Logits processors can't be reused across multiple
generation runs and must be copied"), for the state dict of https://github.com/dottxt-ai/outlines/pull/628.
"""
import copy
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

VOCAB, D, BATCH, NEW = 64, 32, 32, 32


class TinyDecoder(nn.Module):
    def __init__(self, vocab=VOCAB, d=D):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, past=None):
        h = self.embed(tokens)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        if past is not None:
            k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)
        h = h + torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1) @ v
        return self.head(h[:, -1]), (k, v)


class RegexFSM:
    def __init__(self):
        self.allowed = {0: torch.arange(0, 10), 1: torch.arange(10, 36)}

    def next_state(self, state, token):
        return (state + 1) % 7 if token < 36 else state

    def allowed_token_ids(self, state):
        return self.allowed[state % 2]


class RegexLogitsProcessor:
    def __init__(self, fsm):
        self.fsm = fsm
        self._fsm_state = defaultdict(int)

    def __copy__(self):
        return RegexLogitsProcessor(self.fsm)  # the FSM is shared, the state is new

    def __call__(self, input_ids, scores):
        seq_id = hash(tuple(input_ids))
        if len(input_ids) > 0:
            last_seq_id = hash(tuple(input_ids[:-1]))
            self._fsm_state[seq_id] = self.fsm.next_state(self._fsm_state[last_seq_id], input_ids[-1])
        mask = torch.full_like(scores, float("-inf"))
        mask[self.fsm.allowed_token_ids(self._fsm_state[seq_id])] = 0
        return scores + mask


class SequenceGeneratorAdapter:
    def __init__(self, model, processor):
        self.model, self.processor = model, processor

    def __call__(self, prompts, max_new, g):
        processor = copy.copy(self.processor)  # the fix: a fresh state for every request
        outputs = [[] for _ in range(prompts.shape[0])]
        with torch.inference_mode():
            logits, past = self.model(prompts)
            for _ in range(max_new):
                toks = []
                for i, row in enumerate(logits):
                    probs = processor(outputs[i], row).softmax(-1)
                    tok = int(torch.multinomial(probs, 1, generator=g))  # temperature 1.0
                    outputs[i].append(tok)
                    toks.append(tok)
                logits, past = self.model(torch.tensor(toks)[:, None], past)
        return outputs


def run(tracker_factory, steps=30):
    g = seed(1160)
    model = TinyDecoder().eval()
    generator = SequenceGeneratorAdapter(model, RegexLogitsProcessor(RegexFSM()))
    with tracker_factory(model) as tracker:
        for _ in range(steps):
            prompts = torch.randint(0, VOCAB, (BATCH, 8), generator=g)
            generator(prompts, NEW, g)
            tracker.step()
