"""What tracking costs on a loop whose leak fragments the C heap: whole-loop time.

    python benchmarks/fragmented_heap.py [--blocks 800] [--steps 60] [--rounds 2] [--level auto]

A deep model (`--blocks` residual blocks of 4 modules each) whose every step's output is kept with
its autograd graph: the heap fills with free chunks, and glibc's heap counter (mallinfo2, memleak's
CPU memory series) walks them all on each read, 33 ms a read by step 40 at 800 blocks against a
60 ms step. Each round runs the loop untracked and tracked (each in a process of its own, the
same seed), the tracked one's time from `memleak.track` to its close, and prints their ratio and
whether the leak was named. Before the heap read was sampled on such a heap and the module reads
skipped (2026-11-28), 47 tracked steps took over 12 minutes.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LOOP = """
import sys, time, torch
from torch import nn
import memleak
blocks, steps, level, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
torch.set_num_threads(1)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.n, self.act = nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU()
    def forward(self, x):
        return x + self.act(self.n(self.a(x)))
model = nn.Sequential(nn.Linear(32, 8), *[Block() for _ in range(blocks)], nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
t0 = time.perf_counter()
tracker = memleak.track(model, optimizer=opt, level=level, out=out) if level != "none" else None
if tracker is not None:
    tracker.start()
for _ in range(steps):
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    out_ = model(x)
    loss = nn.functional.cross_entropy(out_, y)
    opt.zero_grad(); loss.backward(); opt.step()
    history.append(out_)  # the leak: every step's graph
if tracker is not None:
    tracker.close()
seconds = time.perf_counter() - t0
named = tracker is not None and any("history" in s.location for s in tracker.report().suspects[:1])
print(seconds, int(named))
"""


def loop(blocks: int, steps: int, level: str, out: str) -> tuple[float, bool]:
    res = subprocess.run([sys.executable, "-c", LOOP, str(blocks), str(steps), level, out],
                         capture_output=True, text=True, check=True)
    seconds, named = res.stdout.split()[-2:]
    return float(seconds), named == "1"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=800)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--level", default="auto")
    args = ap.parse_args(argv)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            base, _ = loop(args.blocks, args.steps, "none", "")
            t0 = time.perf_counter()
            tracked, named = loop(args.blocks, args.steps, args.level, str(Path(tmp) / f"run{r}"))
            ratios.append(tracked / base)
            print(f"  round {r + 1}: untracked {base:.1f} s, {args.level} {tracked:.1f} s "
                  f"({time.perf_counter() - t0:.1f} s with the report), {tracked / base:.2f}x, "
                  f"leak named: {named}", flush=True)
    print(f"{args.blocks} blocks, {args.steps} steps, {args.level}: whole loop tracked / untracked "
          f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
