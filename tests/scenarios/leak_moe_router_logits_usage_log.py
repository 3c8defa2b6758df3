"""Training a small mixture-of-experts transformer while measuring expert load balance: a forward hook
on every router stores the router logits of each forward in ``routing_log[layer]`` so that the
per-expert usage (softmax, top-k counts, balance coefficient) can be computed over the whole epoch at
its end. The hook keeps ``output`` as the router returns it, during training: each stored tensor is
not only the logits but the graph that made them (the gate, the attention below it, the embeddings),
so every step's graph and saved activations stay alive until the epoch ends.

Real case: vllm-project/vllm https://github.com/vllm-project/vllm/issues/19342 ("I would like to run a
Qwen/Qwen3-30B-A3B model and need to store the router logits for each prompt in order to calculate the
usage balance among experts"), and the MoE router-logit statistics of
https://github.com/InternLM/xtuner/pull/1302 ("router logit metrics"). Here the same bookkeeping runs
inside the training loop, without ``detach()``.
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "routing_log", "top": 1}

VOCAB, D, E, T, B = 256, 64, 8, 32, 16


class Router(nn.Module):
    def __init__(self, d=D, experts=E):
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)

    def forward(self, h):
        return self.gate(h)


class MoEBlock(nn.Module):
    def __init__(self, d=D, experts=E, top_k=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.router = Router(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                     for _ in range(experts))
        self.top_k = top_k

    def forward(self, h):
        h = h + self.attn(h, h, h, need_weights=False)[0]
        logits = self.router(h)
        w, idx = logits.softmax(-1).topk(self.top_k, dim=-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            sel = (idx == e)
            if sel.any():
                gate_w = (w * sel).sum(-1, keepdim=True)
                out = out + gate_w * expert(h)
        return h + out


class MoELM(nn.Module):
    def __init__(self, vocab=VOCAB, d=D, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(MoEBlock(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(19342)
    model = MoELM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    routing_log = defaultdict(list)

    def record_router_logits(name):
        def hook(module, inputs, output):
            routing_log[name].append(output)  # the leak: kept with its graph until the epoch ends
        return hook

    handles = [m.register_forward_hook(record_router_logits(n))
               for n, m in model.named_modules() if isinstance(m, Router)]
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                ids = torch.randint(0, VOCAB, (B, T + 1), generator=g)
                logits = model(ids[:, :-1])
                loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
        # at the epoch end: expert usage per layer (never reached within the run)
    finally:
        for h in handles:
            h.remove()
