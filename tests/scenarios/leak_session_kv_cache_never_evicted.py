"""A chat server that keeps each session's KV cache (``past_key_values``) in a dict so that the
next turn need not re-encode the conversation, and never evicts a session.

Real case: https://github.com/lm-sys/FastChat/issues/2058 ("How to go about saving
past_key_values of user conversations so as to not rerun the conversation again and again through
the model"), and the unbounded session store fixed in
https://github.com/jenkinsci/resources-ai-chatbot-plugin/pull/66 ("chat sessions being stored
indefinitely in an in-memory dictionary without any cleanup mechanism ... memory usage to
increase linearly with every new session"). Most users send one or two turns and leave; their
caches stay. Generation runs under ``torch.inference_mode()``: no graph, only the cached keys and
values. The loop is driven by a request handler (``server.handle``), not by a training step.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "sessions", "top": 1}


class TinyDecoder(nn.Module):
    def __init__(self, vocab=64, d=DIM, layers=2):
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


class ChatServer:
    def __init__(self, model):
        self.model = model
        self.sessions = {}  # session id -> past_key_values (the leak: never evicted)

    def handle(self, session_id, prompt, max_new_tokens=4):
        past = self.sessions.get(session_id)
        with torch.inference_mode():
            logits, past = self.model(prompt, past)
            out = [int(logits.argmax(-1)[0])]
            for _ in range(max_new_tokens - 1):
                logits, past = self.model(torch.tensor([[out[-1]]]), past)
                out.append(int(logits.argmax(-1)[0]))
        self.sessions[session_id] = past
        return out


def run(tracker_factory, steps=30):
    g = seed(48)
    model = TinyDecoder()
    model.eval()
    server = ChatServer(model)
    with tracker_factory(model) as tracker:
        for step in range(steps):
            # a returning user now and then; mostly new sessions
            sid = f"user-{step - 1}" if step % 4 == 3 else f"user-{step}"
            prompt = torch.randint(0, 64, (1, 48), generator=g)
            server.handle(sid, prompt)
            tracker.step()
