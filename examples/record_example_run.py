"""Record the small saved run shipped in tests/data/example_run/ (used by the notebook and the tests).

A tiny model whose encoder layer caches each forward's keys on itself (a
"cache" that is never cleared, as in a hand-written KV cache left on during
training) is trained for 60 steps on CPU with the real tracker at level
"full". Re-record it after a change of the run format:

    python examples/record_example_run.py            # writes tests/data/example_run/run.jsonl
"""
import argparse
from pathlib import Path

import torch
from torch import nn

import memleak

ROOT = Path(__file__).resolve().parents[1]


class CachingLayer(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.cache = []  # the leak: grows by one (batch, width) tensor every forward, never cleared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.key(x)
        self.cache.append(k)
        return torch.relu(self.value(x)) + k


class Model(nn.Module):
    def __init__(self, width: int = 128, classes: int = 10):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, width), CachingLayer(width))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def record(out: Path, steps: int = 60) -> Path:
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for old in out.glob("*.jsonl"):  # keep the folder's README
        old.unlink()
    with memleak.track(model, optimizer=opt, out=out, level="full", budget="8 GiB") as tracker:
        for _ in range(steps):
            x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()  # ends the iteration
    return tracker.path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "example_run")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    path = record(args.out, args.steps)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    print(memleak.analyze(memleak.load(path)))
