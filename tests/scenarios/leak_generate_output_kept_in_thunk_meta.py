"""A local Hugging Face backend for an LLM-programming library (a copy of mellea's ``LocalHFBackend``).
Each ``instruct()`` call runs ``generate`` twice (the answer, then an LLM-as-a-judge check of it),
with ``return_dict_in_generate=True, output_scores=True`` and the KV cache on. The decoded text goes
into a ``ModelOutputThunk`` that joins the session's chat context, and the raw generate output (the
sequences, the per-token full-vocabulary ``scores`` and the ``past_key_values`` of every layer) is
stashed in ``thunk._meta["hf_output"]`` for later inspection and never removed. The context keeps
every thunk of the conversation, so every generate call's scores and KV cache stay alive.
Generation runs under ``torch.inference_mode()``: no graph, only tensors.

Real case: generative-computing/mellea https://github.com/generative-computing/mellea/issues/378
("``LocalHFBackend`` seems to gradually increase memory on GPU when you repeatedly call instruct,
resulting in a OOM error"), fixed in https://github.com/generative-computing/mellea/pull/544 ("KV caches
and output tensors were stored in mot._meta["hf_output"] and never cleaned up"; "use_cache and
output_scores were always True, creating large tensors even when unused").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_meta", "top": 1}

VOCAB, D, PROMPT, NEW = 1000, 64, 64, 16


class TinyDecoder(nn.Module):
    def __init__(self, vocab=VOCAB, d=D, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, past=None):
        h = self.embed(tokens)
        new_past = []
        for i, qkv in enumerate(self.qkv):
            q, k, v = qkv(h).chunk(3, dim=-1)
            if past is not None:
                k, v = torch.cat([past[i][0], k], 1), torch.cat([past[i][1], v], 1)
            att = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1)
            h = h + att @ v
            new_past.append((k, v))
        return self.head(h[:, -1]), tuple(new_past)


def generate(model, input_ids, max_new_tokens):
    """Greedy ``generate(..., return_dict_in_generate=True, output_scores=True, use_cache=True)``."""
    scores, past, tok, seq = [], None, input_ids, input_ids
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits, past = model(tok, past)
            scores.append(logits)
            tok = logits.argmax(-1, keepdim=True)
            seq = torch.cat([seq, tok], 1)
    return {"sequences": seq, "scores": tuple(scores), "past_key_values": past}


class ModelOutputThunk:
    def __init__(self, value):
        self.value = value
        self._meta = {}


class ChatContext:
    def __init__(self):
        self.turns = []

    def add(self, thunk):
        self.turns.append(thunk)


class LocalHFBackend:
    def __init__(self, model):
        self.model = model

    def generate_from_context(self, ids):
        out = generate(self.model, ids, NEW)
        thunk = ModelOutputThunk(out["sequences"][0, -NEW:].tolist())
        thunk._meta["hf_output"] = out  # the leak: scores and past_key_values kept with the thunk
        return thunk


class Session:
    def __init__(self, backend):
        self.backend = backend
        self.ctx = ChatContext()

    def instruct(self, prompt_ids, g):
        answer = self.backend.generate_from_context(prompt_ids)
        self.ctx.add(answer)
        judge_prompt = torch.cat([prompt_ids, torch.tensor([answer.value])], 1)
        verdict = self.backend.generate_from_context(judge_prompt)
        self.ctx.add(verdict)
        return answer


def run(tracker_factory, steps=30):
    g = seed(378)
    model = TinyDecoder().eval()
    session = Session(LocalHFBackend(model))
    with tracker_factory(model) as tracker:
        for _ in range(steps):
            prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=g)
            session.instruct(prompt, g)
            tracker.step()
