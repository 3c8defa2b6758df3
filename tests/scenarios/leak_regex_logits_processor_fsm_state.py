"""Structured (regex-guided) generation in a serving loop: one ``RegexLogitsProcessor`` is built for
the output schema and passed with every request (as in the vLLM + outlines example below). The
processor is called once per sequence per generated token with that sequence's token ids, and it finds
the FSM state of the sequence by a dict keyed on the hash of the whole token prefix:
``self._fsm_state[hash(tuple(input_ids))] = next_state``. The entries of finished sequences are never
removed (the processor cannot tell when a sequence ends, and resetting the dict between calls broke
generation), so the dict gains one entry per generated token of every request, for as long as the
server runs. Host memory in Python objects (dict slots and int keys), no tensor kept.

Real case: dottxt-ai/outlines https://github.com/dottxt-ai/outlines/pull/628 ("cache FSM state based on
the states input IDs"), https://github.com/dottxt-ai/outlines/pull/760 ("Do not reset
``RegexLogitsProcessor._fsm_state``"), and vllm-project/vllm https://github.com/vllm-project/vllm/issues/3087
(one ``JSONLogitsProcessor`` reused over 256 prompts: "generation became very slow, and the RAM usage
leads to OOM crashes now").
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "_fsm_state", "top": 1}

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
    """A toy FSM: even states allow digits (tokens 0-9), odd states allow letters (10-35)."""

    def __init__(self):
        self.allowed = {0: torch.arange(0, 10), 1: torch.arange(10, 36)}

    def next_state(self, state, token):
        return (state + 1) % 7 if token < 36 else state

    def allowed_token_ids(self, state):
        return self.allowed[state % 2]


class RegexLogitsProcessor:
    def __init__(self, fsm):
        self.fsm = fsm
        self._fsm_state = defaultdict(int)  # hash of the token prefix -> FSM state; never pruned

    def __call__(self, input_ids, scores):
        seq_id = hash(tuple(input_ids))
        if len(input_ids) > 0:
            last_seq_id = hash(tuple(input_ids[:-1]))
            self._fsm_state[seq_id] = self.fsm.next_state(self._fsm_state[last_seq_id], input_ids[-1])
        mask = torch.full_like(scores, float("-inf"))
        mask[self.fsm.allowed_token_ids(self._fsm_state[seq_id])] = 0
        return scores + mask


def serve_batch(model, prompts, processors, max_new, g):
    outputs = [[] for _ in range(prompts.shape[0])]
    with torch.inference_mode():
        logits, past = model(prompts)
        for _ in range(max_new):
            toks = []
            for i, row in enumerate(logits):
                for proc in processors:
                    row = proc(outputs[i], row)
                tok = int(torch.multinomial(row.softmax(-1), 1, generator=g))  # temperature 1.0
                outputs[i].append(tok)
                toks.append(tok)
            logits, past = model(torch.tensor(toks)[:, None], past)
    return outputs


def run(tracker_factory, steps=30):
    g = seed(3087)
    model = TinyDecoder().eval()
    processor = RegexLogitsProcessor(RegexFSM())  # built once, shared by every request
    served = 0
    with tracker_factory(model) as tracker:
        for _ in range(steps):
            prompts = torch.randint(0, VOCAB, (BATCH, 8), generator=g)
            outs = serve_batch(model, prompts, [processor], NEW, g)
            served += len(outs)
            tracker.step()
