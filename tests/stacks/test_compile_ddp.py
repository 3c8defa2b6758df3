"""torch.compile on a DDP-wrapped and on an FSDP2-sharded model (`fully_shard`), two gloo ranks on
CPU, dynamo alone (backend="eager": what dynamo compiles is what is counted, and it stays fast).

One spawn for the module: each rank runs each stack once untracked to warm dynamo up (its skip
caches outlive `torch._dynamo.reset()`: the first run in a process counts ~40 frames more), then
untracked, then tracked at every level (stack_harness.LEVELS); each run resets dynamo and compiles a
fresh model, so its dynamo counts compare whole with the untracked run's. Rank 1 alone plants the
leak of each level; rank 0 is the clean run:

- counters: rank 1 keeps 256 KiB a step (a list of fresh tensors);
- modules: rank 1 caches a tensor on its first layer each step (the attribute scan names it);
- full, auto: rank 1 keeps every step's loss (the reference walk names the list).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch import nn

import memleak
from stacks.stack_harness import LEVELS
from stacks.test_ddp_fsdp2 import assert_only_rank_1_leaks, plant, results, spawn_ranks

STEPS = 30  # level modules scans module attributes every 8-12 steps: 30 give it enough scans
STACKS = ("ddp", "fsdp2")
BACKEND = "eager"
PHASES = {f"{stack}_{level}": (stack, level) for stack in STACKS for level in LEVELS}
MODULE_PREFIX = {"ddp": "module.", "fsdp2": ""}  # DDP wraps the model; fully_shard keeps its tree
LEAK = {"counters": "fresh", "modules": "module_cache", "full": "loss_list", "auto": "loss_list"}


class Net(nn.Module):
    """A model of the test's own: dynamo does not compile nn.Sequential.forward as a frame of its
    own (torch.nn's files), which is what DDP's forward calls after its graph break."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def dynamo_counts() -> dict:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    return {"frames": counters["frames"]["total"], "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": dict(counters["graph_break"]),  # by reason: a break memleak made would be new
            "forward_versions": len(_debug_get_cache_entry_list(Net.forward))}


def _compiled(stack: str):
    """(the compiled model the loop calls, the Net inside it), after a dynamo reset."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)  # the same weights on both ranks
    net = Net()
    if stack == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(net.a)
        fully_shard(net.b)
        model = fully_shard(net)
    else:
        model = torch.nn.parallel.DistributedDataParallel(net)
    return torch.compile(model, backend=BACKEND), net


def _side(rank: int, stack: str, levels, out: Path, steps: int = STEPS) -> dict:
    """One compiled model of `stack` run `steps` steps per entry of `levels`, one after the other:
    untracked (None) or tracked at that level. Returns {"counts": dynamo's at the end, level or
    block index: that block's losses, seconds and what it left installed}."""
    from memleak.probes.host import heap_counter
    from stacks.stack_harness import _global_hooks, left_installed

    heap = heap_counter() or (lambda: 0)
    compiled, net = _compiled(stack)
    opt = torch.optim.SGD(compiled.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    hooks = _global_hooks()
    installed = left_installed([compiled], [opt], hooks)  # FSDP2's own hooks, there before and after
    blocks: dict = {}
    for i, level in enumerate(levels):
        leak = LEAK[level] if level is not None and rank == 1 else None
        keep: list = []
        net.a.seen = []
        tracker = memleak.track(compiled, optimizer=opt, out=out / f"{stack}_{level}", level=level) if level else None
        losses = []
        t0, heap0 = time.perf_counter(), heap()
        if tracker is not None:
            tracker.start()
        try:
            for _ in range(steps):
                loss = compiled(torch.randn(16, 64, generator=gen)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                plant(leak, keep, net.a.seen, loss)
        finally:
            if tracker is not None:
                tracker.close()
        seconds, heap_per_step = time.perf_counter() - t0, (heap() - heap0) / steps
        left = [x for x in left_installed([compiled], [opt], hooks) if x not in installed]
        blocks[level or i] = {"losses": losses, "seconds": seconds, "left": left, "heap_per_step": heap_per_step}
    return {"counts": dynamo_counts(), **blocks}


def _stacks(rank: int, out: Path) -> dict:
    results = {}
    for stack in STACKS:
        _side(rank, stack, [None], out, steps=2)  # warm-up: counts from the next run on
        untracked = _side(rank, stack, [None] * len(LEVELS), out)
        tracked = _side(rank, stack, LEVELS, out)
        results[stack] = {"untracked": untracked, "tracked": tracked}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compiled_dist")
    print(f"2 gloo ranks, {len(PHASES)} compiled phases: {spawn_ranks(out, _stacks):.1f} s")
    return out


@pytest.mark.parametrize("phase", list(PHASES))
def test_compiled_losses_are_bit_identical_and_nothing_is_left_installed(ranks, phase):
    stack, level = PHASES[phase]
    for rank in (0, 1):
        r = results(ranks, rank)[stack]
        untracked = r["untracked"][str(LEVELS.index(level))]  # the block run at the same steps
        assert len(r["tracked"][level]["losses"]) == STEPS
        assert r["tracked"][level]["losses"] == untracked["losses"], (phase, rank)
        assert r["tracked"][level]["left"] == [] and untracked["left"] == [], (phase, rank)


@pytest.mark.parametrize("stack", STACKS)
def test_tracking_adds_no_graph_break_no_recompile_no_frame(ranks, stack):
    for rank in (0, 1):
        untracked, tracked = (results(ranks, rank)[stack][side]["counts"] for side in ("untracked", "tracked"))
        print(rank, untracked)
        assert untracked["graphs"] >= 1 and untracked["forward_versions"] == 1, untracked
        assert tracked == untracked, (stack, rank)  # every level run, one after the other


@pytest.mark.parametrize("phase", list(PHASES))
def test_per_rank_files_and_the_leak_on_rank_1_is_named_as_rank_1s(ranks, phase):
    stack, level = PHASES[phase]
    folder = ranks / phase
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["run-rank0-of2.jsonl", "run-rank1-of2.jsonl"]
    run = memleak.load(folder)
    assert run.steps.groupby("rank").size().to_dict() == {0: STEPS, 1: STEPS}  # every step an iteration
    report = memleak.analyze(run)
    assert_only_rank_1_leaks(report, results(ranks, 0)[stack]["untracked"]["0"]["heap_per_step"])
    holder = {"fresh": None, "module_cache": f"{MODULE_PREFIX[stack]}a.seen", "loss_list": "keep"}[LEAK[level]]
    if holder is None:
        assert [(d.rank, d.kind) for d in report.divergences] == [(1, "leaks_alone")], str(report)
    else:
        assert report.suspects[0].location == f"rank 1: {holder}", str(report)
