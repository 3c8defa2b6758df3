"""Small CPU models and data shared by the scenarios."""
from __future__ import annotations

import contextlib
import io

import torch
from torch import nn

DIM = 32


def seed(n: int = 0) -> torch.Generator:
    torch.manual_seed(n)
    # on the default device: ``with torch.device("cuda"):`` runs a scenario on CUDA
    # (benchmarks/acceptance/scenarios.py), and a CPU generator cannot draw CUDA tensors
    return torch.Generator(device=torch.get_default_device()).manual_seed(n)


class MLP(nn.Module):
    def __init__(self, d_in: int = DIM, hidden: int = 64, d_out: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return self.head(h)


def batch(g: torch.Generator, n: int = 32, d: int = DIM, classes: int = 4):
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 50, d: int = DIM, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True), layers,
            enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def state_to_bytes(state: dict) -> bytes:
    """A state dict serialized as bytes (``torch.save`` into memory), as a learner sends it to an actor."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


@contextlib.contextmanager
def gloo_group_of_one():
    """A torch.distributed process group of this process alone (gloo, an in-memory store, no
    port), destroyed on the way out; one already there is used as it is and left alone."""
    import torch.distributed as dist

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        if own:
            dist.destroy_process_group()
