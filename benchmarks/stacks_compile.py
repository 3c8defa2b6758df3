"""Overhead of tracking under torch.compile, DDP and FSDP2, a Hugging Face Trainer fit and a
Lightning fit: whole-loop time, tracked over untracked, per level.

    python benchmarks/stacks_compile.py [--rounds 5] [--steps 30] [--stacks compile,hf,lightning,ddp,fsdp2]
        [--levels counters,modules,full,auto]   (compiled-ddp, compiled-fsdp2: torch.compile'd, 2 ranks)

The method of benchmarks/stacks.py (benchmarks/paired.py): per round, every (stack, level) block and its untracked block run in a
shuffled order; a block is the whole loop (or the whole fit), timed end to end (wall clock and
process CPU time); the ratio is the median over rounds of tracked / untracked within the round.
A compiled model is compiled once (a warm-up block) and reused by every block, so blocks time
steps, not compiles. DDP and FSDP2 run in two gloo ranks (one spawn); rank 0's ratios are shown.
On a shared CPU machine the CPU-time ratio is the steadier one.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import memleak  # noqa: E402
from paired import measure  # noqa: E402

LEVELS = ("counters", "modules", "full", "auto")
D = 128


class Net(nn.Module):
    def __init__(self, layers: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
                                    for _ in range(layers))
        self.head = nn.Linear(D, 1)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def _data(n=64):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n, D, generator=g) for _ in range(8)]


def compiled_loop(**options) -> Callable[[str | None, int], None]:
    """A block runner over one compiled model, compiled once and reused by every block."""
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, **options)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _data()

    def run(level, steps):
        tracker = memleak.track(compiled, optimizer=opt, level=level) if level else None
        if tracker is not None:
            tracker.start()
        try:
            for i in range(steps):
                opt.zero_grad()
                compiled(data[i % len(data)]).pow(2).mean().backward()
                opt.step()
        finally:
            if tracker is not None:
                tracker.close()

    return run


def hf_fit() -> Callable[[str | None, int], None]:
    import transformers

    from memleak.integrations.huggingface import MemleakCallback

    class Tokens(torch.utils.data.Dataset):
        ids = torch.randint(0, 1000, (64, 32), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def run(level, steps):
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=1000, n_positions=32, n_embd=64, n_layer=2, n_head=2)
        out = tempfile.mkdtemp()
        cbs = [MemleakCallback(out=Path(out) / "m", level=level, print_report=False)] if level else []
        args = transformers.TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=8, report_to=[], save_strategy="no",
            logging_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
        transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Tokens(),
                             callbacks=cbs).train()

    return run


def lightning_fit() -> Callable[[str | None, int], None]:
    import lightning.pytorch as pl

    from memleak.integrations.lightning import MemleakCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def run(level, steps):
        torch.manual_seed(0)
        out = tempfile.mkdtemp()
        cbs = [MemleakCallback(out=Path(out) / "m", level=level, print_report=False)] if level else []
        data = torch.utils.data.TensorDataset(torch.cat(_data()))
        trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                             callbacks=cbs)
        trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=64))

    return run


STACKS: dict[str, Callable[[], Callable[[str | None, int], None]]] = {
    "torch.compile (inductor, fullgraph=True)": lambda: compiled_loop(fullgraph=True),
    "torch.compile (mode=reduce-overhead)": lambda: compiled_loop(mode="reduce-overhead"),
    "HF Trainer fit (GPT-2 from config)": hf_fit,
    "Lightning fit": lightning_fit,
}


def block(run, level, steps) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    run(level, steps)
    return time.perf_counter() - t0, time.process_time() - c0


# ---------------------------------------------------------------- DDP and FSDP2, two gloo ranks

def _dist_runner(kind: str, compiled: bool = False):
    """A block runner over one DDP or FSDP2 model; `compiled`: torch.compile'd (backend="eager",
    dynamo alone, as tests/stacks/test_compile_ddp.py), compiled once by the warm-up block."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = Net()
    if kind == "FSDP2":
        for b in net.blocks:
            fully_shard(b)
        model = fully_shard(net)
    else:
        model = torch.nn.parallel.DistributedDataParallel(net)
    if compiled:
        model = torch.compile(model, backend="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _data()

    def run(level, steps):
        tracker = memleak.track(model, optimizer=opt, level=level) if level else None
        if tracker is not None:
            tracker.start()
        try:
            for i in range(steps):
                opt.zero_grad()
                model(data[i % len(data)]).pow(2).mean().backward()
                opt.step()
        finally:
            if tracker is not None:
                tracker.close()

    return run


def _dist_worker(rank, port, levels, rounds, steps, out, kinds, compiled):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    logging.getLogger("memleak").setLevel(logging.ERROR)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        random.seed(0)  # the same shuffled order on both ranks: their collectives must pair up
        runners = {f"{k}, 2 gloo ranks": _dist_runner(k) for k in kinds}
        runners.update({f"compiled {k} (eager), 2 gloo ranks": _dist_runner(k, compiled=True) for k in compiled})
        ratios, wall = measure({n: functools.partial(block, r) for n, r in runners.items()}, levels, rounds, steps)
        if rank == 0:
            rows = {f"{n}|{lv}": r for (n, lv), r in ratios.items()}
            base = {n: statistics.median(wall[(n, None)]) for n in runners}
            Path(out).write_text(json.dumps({"ratios": rows, "base": base}))
    finally:
        torch.distributed.destroy_process_group()


def measure_distributed(levels, rounds, steps, kinds=("DDP", "FSDP2"), compiled=()):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.mkdtemp()) / "ratios.json"
    torch.multiprocessing.spawn(_dist_worker, args=(port, levels, rounds, steps, str(out), kinds, compiled), nprocs=2,
                                join=True)
    got = json.loads(out.read_text())
    ratios = {tuple(k.split("|")): tuple(v) for k, v in got["ratios"].items()}
    return ratios, got["base"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--stacks", default="compile,hf,lightning,ddp,fsdp2,compiled-ddp,compiled-fsdp2",
                    help="comma-separated substrings of stack names; ddp, fsdp2, compiled-ddp, "
                         "compiled-fsdp2: the distributed stacks")
    ap.add_argument("--levels", default=",".join(LEVELS))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    random.seed(0)
    logging.getLogger("memleak").setLevel(logging.ERROR)
    wanted = [w.lower() for w in args.stacks.split(",")]
    levels = tuple(args.levels.split(","))
    names = [n for n in STACKS if any(w in n.lower() for w in wanted)]
    ratios, wall = measure({n: functools.partial(block, STACKS[n]()) for n in names}, levels, args.rounds, args.steps)
    base = {n: statistics.median(wall[(n, None)]) for n in names}
    kinds = tuple(k for k in ("DDP", "FSDP2") if k.lower() in wanted)
    compiled = tuple(k for k in ("DDP", "FSDP2") if f"compiled-{k.lower()}" in wanted)
    if kinds or compiled:
        r, b = measure_distributed(levels, args.rounds, args.steps, kinds, compiled)
        ratios.update(r)
        base.update(b)
        names += list(b)
    print(f"cpu, torch {torch.__version__}, memleak {memleak.__version__}: whole-loop time of {args.steps} "
          f"iterations, tracked / untracked, median of {args.rounds} paired rounds (wall | CPU)")
    width = max(len(n) for n in names)
    print(f"  {'stack':{width}}  {'untracked':>10}  " + "  ".join(f"{lv:>15}" for lv in levels))
    for name in names:
        cells = "  ".join(f"{ratios[(name, lv)][0]:6.2f}x |{ratios[(name, lv)][1]:5.2f}x" for lv in levels)
        print(f"  {name:{width}}  {base[name] / args.steps * 1e3:7.2f} ms  {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
