"""Overhead of tracking per training stack and level: whole-loop time, tracked over untracked.

    python benchmarks/stacks.py [--rounds 5] [--steps 30] [--stacks amp,lbfgs] [--levels counters,full]

Each stack is a builder in STACKS (name -> function(device) -> Loop): a model, its optimizers
and one iteration as a function; add a stack by adding a builder. The loop is tracked as a user
would: ``memleak.track(model, optimizer=...)`` with no ``tracker.step()`` (the optimizer's step
ends each iteration), or, for loops with no optimizer, as ``memleak run`` tracks them (backward
passes or calls of the model end iterations). Per round, every (stack, level) block and its
untracked block run in a shuffled order; a block is the whole loop, timed end to end (wall clock
and process CPU time); the ratio is the median over rounds of tracked / untracked within the round.
On a shared CPU machine the CPU-time ratio is the steadier one.
"""
from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import memleak  # noqa: E402
from memleak.recorder import Tracker  # noqa: E402
from paired import measure  # noqa: E402

LEVELS = ("counters", "modules", "full", "auto")
D = 128


@dataclass
class Loop:
    model: nn.Module
    optimizers: list  # empty: tracked as memleak run tracks a loop without an optimizer
    step: Callable[[int], float]  # one iteration; returns the loss


class Net(nn.Module):
    def __init__(self, ckpt: str | None = None, layers: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
                                    for _ in range(layers))
        self.head = nn.Linear(D, 1)
        self.ckpt = ckpt

    def forward(self, x):
        for b in self.blocks:
            x = x + (checkpoint(b, x, use_reentrant=self.ckpt == "reentrant") if self.ckpt else b(x))
        return self.head(x)


def _data(device, n=64):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n, D, generator=g).to(device) for _ in range(8)]


def plain(device, ckpt=None, autocast=False, scaler=False):
    torch.manual_seed(0)
    model = Net(ckpt).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scale = torch.amp.GradScaler(device.type, enabled=scaler)
    data = _data(device)

    def step(i):
        x = data[i % len(data)].requires_grad_(ckpt == "reentrant")
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(x).float().pow(2).mean()
        scale.scale(loss).backward()
        scale.step(opt)
        scale.update()
        return loss.item()

    return Loop(model, [opt], step)


def accumulation(device, k=4):
    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _data(device, 16)

    def step(i):
        for j in range(k):
            loss = model(data[(i * k + j) % len(data)]).pow(2).mean() / k
            loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return Loop(model, [opt], step)


def gan(device):
    torch.manual_seed(0)
    gen, disc = Net(layers=2).to(device), nn.Sequential(nn.Linear(1, D), nn.GELU(), nn.Linear(D, 1)).to(device)
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    bce = nn.BCEWithLogitsLoss()
    data = _data(device)

    def step(i):
        fake = gen(data[i % len(data)])
        real = torch.randn_like(fake)
        opt_d.zero_grad()
        loss_d = bce(disc(real), torch.ones_like(real)) + bce(disc(fake.detach()), torch.zeros_like(real))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(disc(fake), torch.ones_like(real))
        loss_g.backward()
        opt_g.step()
        return loss_g.item()

    return Loop(gen, [opt_d, opt_g], step)


def scheduler(device):
    loop = plain(device)
    sched = torch.optim.lr_scheduler.StepLR(loop.optimizers[0], 10, 0.9)
    inner = loop.step

    def step(i):
        loss = inner(i)
        sched.step()
        return loss

    return Loop(loop.model, loop.optimizers, step)


def lbfgs(device):
    torch.manual_seed(0)
    model = Net(layers=2).to(device)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4, history_size=8)
    data = _data(device)

    def step(i):
        x = data[i % len(data)]

        def closure():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        return opt.step(closure).item()

    return Loop(model, [opt], step)


def hand_sgd(device):
    torch.manual_seed(0)
    model = Net().to(device)
    data = _data(device)

    def step(i):
        model.zero_grad()
        loss = model(data[i % len(data)]).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-1e-3)
        return loss.item()

    return Loop(model, [], step)


def inference(device):
    torch.manual_seed(0)
    model = Net().to(device).eval()
    data = _data(device)

    def step(i):
        with torch.no_grad():
            return model(data[i % len(data)]).sum().item()

    return Loop(model, [], step)


STACKS: dict[str, Callable[[torch.device], Loop]] = {
    "plain (AdamW)": plain,
    "autocast bf16": lambda dev: plain(dev, autocast=True),
    "autocast bf16 + GradScaler": lambda dev: plain(dev, autocast=True, scaler=True),
    "checkpoint (non-reentrant)": lambda dev: plain(dev, ckpt="non-reentrant"),
    "checkpoint (reentrant)": lambda dev: plain(dev, ckpt="reentrant"),
    "gradient accumulation x4": accumulation,
    "GAN, two optimizers": gan,
    "LR scheduler": scheduler,
    "LBFGS closure": lbfgs,
    "no optimizer: hand SGD (memleak run)": hand_sgd,
    "no optimizer: inference (memleak run)": inference,
}


def block(build, device, level, steps) -> tuple[float, float]:
    """Wall and CPU seconds of one whole loop of `steps` iterations (level None: untracked)."""
    loop = build(device)
    tracker = None
    if level is not None:
        tracker = Tracker(loop.model, optimizer=loop.optimizers or None, level=level, device=device)
        tracker._boundaries.auto = not loop.optimizers  # as memleak run tracks a loop with no optimizer
        tracker.start()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        for i in range(steps):
            loop.step(i)
        sync()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        if tracker is not None:
            tracker.close()
    if tracker is not None:
        assert tracker.iterations >= steps - 2, f"{tracker.iterations} iterations recorded of {steps}"
    return wall, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--stacks", default=None, help="comma-separated substrings of stack names (default: all)")
    ap.add_argument("--levels", default=",".join(LEVELS))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    random.seed(0)
    import logging

    logging.getLogger("memleak").setLevel(logging.ERROR)
    wanted = args.stacks.split(",") if args.stacks else None
    names = [n for n in STACKS if wanted is None or any(w.lower() in n.lower() for w in wanted)]
    levels = tuple(args.levels.split(","))
    device = torch.device(args.device)
    blocks = {n: functools.partial(block, STACKS[n], device) for n in names}
    ratios, wall = measure(blocks, levels, args.rounds, args.steps)
    print(f"{device}, torch {torch.__version__}, memleak {memleak.__version__}: whole-loop time of {args.steps} "
          f"iterations, tracked / untracked, median of {args.rounds} paired rounds (wall | CPU)")
    width = max(len(n) for n in names)
    print(f"  {'stack':{width}}  {'untracked':>10}  " + "  ".join(f"{lv:>15}" for lv in levels))
    for name in names:
        base = statistics.median(wall[(name, None)]) / args.steps * 1e3
        cells = "  ".join(f"{ratios[(name, lv)][0]:6.2f}x |{ratios[(name, lv)][1]:5.2f}x" for lv in levels)
        print(f"  {name:{width}}  {base:7.2f} ms  {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
