"""DDP and FSDP2 (`fully_shard`) on CPU with gloo, two ranks started by torch.multiprocessing.

One spawn for the module (it costs ~10 s): each rank runs every phase untracked, then tracked,
and writes its losses and what was left installed; rank 1 alone plants each phase's leak.

- ddp: level counters, rank 1 keeps 256 KiB a step (a list of fresh tensors);
- ddp_full: level full, rank 1 caches its first layer's output on that submodule each step;
- fsdp2: level full, parameters sharded across the ranks, rank 1 keeps every step's loss.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch

import memleak
from memleak.cli import main as cli_main
from memleak.run import MultiRun

KIB = 1024
STEPS = 40
PHASES = {"ddp": "counters", "ddp_full": "full", "fsdp2": "full"}
FULL_PARAM_BYTES = (64 * 64 + 64 + 64 + 1) * 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(phase: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(what the loop calls, the plain module inside it)."""
    from helpers import make_model

    net = make_model()  # the same weights on both ranks
    if phase == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(net[0])
        fully_shard(net[2])
        return fully_shard(net), net
    return torch.nn.parallel.DistributedDataParallel(net), net


def _loop(rank: int, phase: str, tracked: bool, out: Path) -> dict:
    model, net = _model(phase)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    leaks = tracked and rank == 1
    keep: list = []
    net[0].seen = []
    tracker = memleak.track(model, optimizer=opt, out=out / phase, level=PHASES[phase]) if tracked else None
    losses = []
    t0 = time.perf_counter()
    if tracker is not None:
        tracker.start()
    try:
        for _ in range(STEPS):
            loss = model(torch.randn(16, 64, generator=gen)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if leaks and phase == "ddp":
                keep.append(torch.ones(256 * KIB // 4))
            elif leaks and phase == "ddp_full":
                net[0].seen.append(torch.ones(64 * KIB // 4))  # a tensor cached on a submodule
            elif leaks:
                keep.append(loss)  # every step's loss, its graph attached
    finally:
        if tracker is not None:
            tracker.close()
    seconds = time.perf_counter() - t0
    from torch.nn.modules import module as hooks

    left = [m for m in model.modules() if any(callable(h) and "memleak" in getattr(h, "__module__", "")
                                              for h in [*m._forward_hooks.values(), *m._forward_pre_hooks.values()])]
    left += list(hooks._global_forward_hooks) + list(hooks._global_forward_pre_hooks)
    return {"losses": losses, "seconds": seconds, "left": len(left)}


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for phase in PHASES:
            results[phase] = {"untracked": _loop(rank, phase, False, Path(out)),
                              "tracked": _loop(rank, phase, True, Path(out))}
        (Path(out) / f"results{rank}.json").write_text(json.dumps(results))
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    t0 = time.perf_counter()
    torch.multiprocessing.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    print(f"2 gloo ranks, {len(PHASES)} phases: {time.perf_counter() - t0:.1f} s")
    return out


def results(ranks: Path, rank: int) -> dict:
    return json.loads((ranks / f"results{rank}.json").read_text())


# ---------------------------------------------------------------- every phase

@pytest.mark.parametrize("phase", list(PHASES))
def test_losses_are_bit_identical_and_nothing_is_left_installed(ranks, phase):
    for rank in (0, 1):
        r = results(ranks, rank)[phase]
        assert r["tracked"]["losses"] == r["untracked"]["losses"], (phase, rank)
        assert r["tracked"]["left"] == 0 and r["untracked"]["left"] == 0


@pytest.mark.parametrize("phase", list(PHASES))
def test_each_rank_writes_its_own_file_and_only_rank_1_leaks(ranks, phase):
    folder = ranks / phase
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["run-rank0-of2.jsonl", "run-rank1-of2.jsonl"]
    for r in (0, 1):
        header = json.loads((folder / f"run-rank{r}-of2.jsonl").read_text().splitlines()[0])
        assert (header["rank"], header["world_size"], header["level"]) == (r, 2, PHASES[phase])
    report = memleak.analyze(memleak.load(folder))
    print(report)
    assert report.ranks[1].verdict == "leak", str(report)
    assert report.ranks[0].verdict != "leak", str(report)
    assert [(d.rank, d.kind) for d in report.divergences] == [(1, "leaks_alone")]


def test_ddp_full_names_the_submodule_cache_on_rank_1(ranks):
    report = memleak.analyze(memleak.load(ranks / "ddp_full"))
    assert report.suspects[0].location == "rank 1: module.0.seen", str(report)


def test_fsdp2_names_the_kept_losses_on_rank_1(ranks):
    report = memleak.analyze(memleak.load(ranks / "fsdp2"))
    assert report.suspects[0].location == "rank 1: keep", str(report)


def test_fsdp2_categories_count_this_ranks_shard_of_the_parameters(ranks):
    run = memleak.load(ranks / "fsdp2")
    shards = []
    for rank in (0, 1):
        cats = run.ranks[rank].module_records[-1].categories
        assert cats["gradient"] == cats["parameter"], cats  # gradients are sharded like parameters
        shards.append(cats["parameter"])
    # each rank counts its own shard (dim 0 split in two: the 1-row layer lives on rank 0 alone),
    # never the all-gathered whole
    assert sum(shards) == FULL_PARAM_BYTES and max(shards) < 0.51 * FULL_PARAM_BYTES, shards
    assert run.meta["model"] == "FSDPSequential"  # fully_shard swaps the class in place


# ---------------------------------------------------------------- the counters run, reported

def test_a_leak_on_rank_1_only_is_reported_on_rank_1_and_not_on_rank_0(ranks):
    run = memleak.load(ranks / "ddp")
    assert isinstance(run, MultiRun)
    assert list(run.ranks) == [0, 1]
    assert list(run.steps.columns[:2]) == ["rank", "step"]
    assert run.steps.groupby("rank").size().to_dict() == {0: STEPS, 1: STEPS}
    assert run.meta["world_size"] == 2
    report = memleak.analyze(run)
    assert sorted(report.ranks) == [0, 1]
    assert report.verdict == "leak" and report.leak
    assert report.suspects[0].location.startswith("rank 1: ")
    assert not any(s.location.startswith("rank 0") and s.leak and s.confidence >= 0.5 for s in report.suspects)
    text = str(report)
    assert "LEAK on rank 1" in text and "rank 0 does not leak" in text
    assert "rank 1 leaks" in text


def test_report_saves_plots_and_works_from_the_cli(ranks, tmp_path, capsys):
    report = memleak.analyze(memleak.load(ranks / "ddp"))
    fig = report.plot()
    assert len(fig.axes[0].lines) == 2
    paths = report.save(tmp_path / "out")
    names = {p.relative_to(tmp_path / "out").as_posix() for p in paths}
    assert {"report.txt", "findings.json", "memory.png", "rank0/report.txt", "rank1/report.txt"} <= names
    found = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert found["verdict"] == "leak" and found["ranks"]["1"]["verdict"] == "leak"
    assert cli_main(["report", str(ranks / "ddp"), "--check"]) == 1
    assert "LEAK on rank 1" in capsys.readouterr().out
