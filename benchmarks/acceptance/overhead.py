"""Part "overhead": what tracking costs at each level on a transformer training step of about
10 ms (on CUDA; sized to the target by measuring), eager and under torch.compile.

Each round runs one block of steps untracked and one per level, in a shuffled order; a
block's time is the whole loop's (synchronised at its end), without the tracker's start and
close, which are reported apart. The ratio per level is the median over rounds of each
round's tracked block over that round's untracked one, all in this one process.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from .harness import Checks, Context

GOALS = {"counters": 1.02, "modules": 1.10, "full": 1.30}


def make_model(sz: dict, dev):
    import torch
    from torch import nn

    torch.manual_seed(0)
    d, vocab = sz["d"], sz["vocab"]

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, sz["heads"], 4 * d, dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, sz["layers"], enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)))

    model = Transformer().to(dev)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def make_data(sz: dict, batch: int, dev) -> list:
    import torch

    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, sz["vocab"], (batch, sz["seq"] + 1), generator=g).to(dev) for _ in range(4)]


def block(model, opt, data, dev, steps: int, level: str | None) -> dict[str, float]:
    """One block of training steps, tracked at `level` (None: untracked): seconds of the loop,
    and of the tracker's start and close."""
    import torch
    from torch import nn

    import memleak

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    tracker = memleak.track(model, optimizer=opt, level=level, device=dev).start() if level else None
    sync()
    t1 = time.perf_counter()
    for i in range(steps):
        tokens = data[i % len(data)]
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i % 10 == 9:
            loss.item()  # a loop logs now and then
    sync()
    t2 = time.perf_counter()
    if tracker is not None:
        tracker.close()
    return {"loop": t2 - t1, "start": t1 - t0, "close": time.perf_counter() - t2}


def calibrate(model, opt, sz: dict, dev) -> int:
    """The batch size whose untracked step takes about sz["target_ms"] (the configured batch without a target)."""
    batch = sz["batch"]
    if not sz.get("target_ms"):
        return batch
    for _ in range(3):
        block(model, opt, make_data(sz, batch, dev), dev, 3, None)  # warm-up at this size
        ms = block(model, opt, make_data(sz, batch, dev), dev, 10, None)["loop"] * 100
        new = max(1, min(512, round(batch * sz["target_ms"] / ms)))
        if abs(new - batch) <= max(1, 0.1 * batch):
            return batch
        batch = new
    return batch


def paired(model, opt, data, dev, sz: dict, levels, ctx: Context, tag: str) -> dict[str, Any]:
    """Rounds of shuffled blocks; ratios per level paired within each round."""
    measured = [None, *levels]
    first = {str(lvl): block(model, opt, data, dev, sz["steps"], lvl)["loop"] for lvl in measured}  # first use
    times: dict[str, list[dict]] = {str(lvl): [] for lvl in measured}
    rng = random.Random(0)
    for r in range(sz["rounds"]):
        order = list(measured)
        rng.shuffle(order)
        for lvl in order:
            times[str(lvl)].append(block(model, opt, data, dev, sz["steps"], lvl))
        ctx.partial[tag] = {"rounds_done": r + 1}
    base = [b["loop"] for b in times["None"]]
    out: dict[str, Any] = {
        "untracked_step_ms": round(statistics.median(base) / sz["steps"] * 1e3, 3),
        "first_block_s": {k: round(v, 3) for k, v in first.items()},
    }
    for lvl in levels:
        loops = [b["loop"] for b in times[lvl]]
        out[lvl] = {
            "ratio": round(statistics.median(t / b for t, b in zip(loops, base, strict=True)), 4),
            "ratios": [round(t / b, 4) for t, b in zip(loops, base, strict=True)],
            "start_ms": round(statistics.median(b["start"] for b in times[lvl]) * 1e3, 2),
            "close_ms": round(statistics.median(b["close"] for b in times[lvl]) * 1e3, 2),
        }
    return out


def run(ctx: Context) -> dict[str, Any]:
    import torch

    from memleak.schema import LEVELS

    sz, checks = ctx.sizes, Checks()
    dev = torch.device("cuda", 0) if ctx.cuda else torch.device("cpu")
    model, opt = make_model(sz, dev)
    batch = calibrate(model, opt, sz, dev)
    data = make_data(sz, batch, dev)
    result: dict[str, Any] = {"device": str(dev), "batch": batch, "config": sz}
    result["eager"] = ctx.partial["eager"] = paired(model, opt, data, dev, sz, LEVELS, ctx, "eager")
    for lvl in LEVELS:
        if lvl in GOALS and ctx.cuda:  # a CPU run on a shared machine measures its neighbours
            checks.check(
                f"eager {lvl} <= {GOALS[lvl]}x",
                result["eager"][lvl]["ratio"] <= GOALS[lvl],
                ratio=result["eager"][lvl]["ratio"],
            )
    if sz.get("compile"):
        compiled = torch.compile(model, backend=sz["backend"])
        t0 = time.perf_counter()
        block(compiled, opt, data, dev, 2, None)
        result["compile_s"] = round(time.perf_counter() - t0, 2)
        result["compiled"] = paired(compiled, opt, data, dev, sz, LEVELS, ctx, "compiled")
    text = ", ".join(
        f"{k} " + "/".join(f"{result[k][lvl]['ratio']:.3f}" for lvl in LEVELS)
        for k in ("eager", "compiled")
        if k in result
    )
    return checks.result(f"step {result['eager']['untracked_step_ms']} ms; ratios {'/'.join(LEVELS)}: {text}", **result)
