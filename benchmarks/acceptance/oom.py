"""Part "oom": a real CUDA out-of-memory error inside a tracked training step with
record_history=True. The same exception type must reach the loop as without memleak, the
run must hold an "oom" event and a "snapshot" event, the snapshot pickle must load with
its OOM in the trace, and ``memleak report`` must read both. The run is the "oom" fixture."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

from .harness import REPO, SKIPPED_NO_CUDA, Checks, Context, fixture_meta, skipped

MiB = 1 << 20
#: A snapshot bigger than this is not kept as a fixture (the fixtures stay under 5 MiB together).
MAX_FIXTURE_SNAPSHOT = 1 * MiB


def _step(torch, model, opt, batch: int, dev) -> None:
    x = torch.randn(batch, 1024, device=dev)
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def _oom_batch(torch, dev) -> int:
    """A batch whose input fits on the device but whose hidden activations (16x the input) do not."""
    free, _ = torch.cuda.mem_get_info(dev)
    return int(0.5 * free) // (1024 * 4)


def _bare_exception(torch, model, opt, dev) -> type | None:
    """The exception type the same OOM raises without memleak."""
    try:
        _step(torch, model, opt, _oom_batch(torch, dev), dev)
    except BaseException as e:
        return type(e)
    finally:
        torch.cuda.empty_cache()
    return None


def _tracked(torch, model, opt, dev, folder, warm_steps: int) -> tuple[type | None, float]:
    import memleak

    t0 = time.perf_counter()
    try:
        with memleak.track(model, optimizer=opt, out=folder, level="counters", record_history=True):
            for _ in range(warm_steps):
                _step(torch, model, opt, 256, dev)
            _step(torch, model, opt, _oom_batch(torch, dev), dev)
    except BaseException as e:
        return type(e), time.perf_counter() - t0
    finally:
        torch.cuda.empty_cache()
    return None, time.perf_counter() - t0


def _name(cls: type | None) -> str:
    return "no exception" if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def memleak_report(path) -> dict[str, Any]:
    """``python -m memleak report PATH`` as a user runs it: exit status and its first lines."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "memleak", "report", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return {"rc": done.returncode, "stdout_head": done.stdout[:2500], "stderr_tail": done.stderr[-1500:]}


def run(ctx: Context) -> dict[str, Any]:
    if not ctx.cuda:
        return skipped(SKIPPED_NO_CUDA, reason="a CUDA OOM and its allocator history need a CUDA device")
    import torch
    from torch import nn

    import memleak

    dev, checks = torch.device("cuda", 0), Checks()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 16 * 1024), nn.ReLU(), nn.Linear(16 * 1024, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    folder = ctx.new_fixture_dir("oom")
    # the tracked OOM first: the fixture's counters then hold its OOM only
    tracked, seconds = _tracked(torch, model, opt, dev, folder, ctx.sizes["warm_steps"])
    bare = _bare_exception(torch, model, opt, dev)
    same = tracked is bare and bare is not None and issubclass(bare, torch.OutOfMemoryError)
    checks.check("the same exception type reaches the loop", same, bare=_name(bare), tracked=_name(tracked))
    run_ = memleak.load(folder)
    events = {e["event"]: e for e in run_.events}
    checks.check("an oom event was recorded", "oom" in events, events=sorted(events))
    checks.check("a snapshot event was recorded", "snapshot" in events, snapshot=events.get("snapshot"))
    result: dict[str, Any] = {"tracked_block_seconds": round(seconds, 2), "oom_event": events.get("oom")}
    snap_path = folder / events["snapshot"]["path"] if "snapshot" in events else None
    if snap_path is not None and snap_path.is_file():
        snap = memleak.load(snap_path)
        result["snapshot_bytes"] = snap_path.stat().st_size
        result["snapshot_trace_entries"] = len(snap.trace)
        checks.check("the snapshot's trace holds the OOM", len(snap.ooms()) >= 1, ooms=len(snap.ooms()))
        result["report_snapshot"] = memleak_report(snap_path)
        checks.check("memleak report reads the snapshot", result["report_snapshot"]["rc"] == 0)
        if snap_path.stat().st_size > MAX_FIXTURE_SNAPSHOT:  # measured above, too big to keep in the repository
            shutil.move(snap_path, ctx.work_dir("oom") / snap_path.name)
    result["report_run"] = memleak_report(folder)
    checks.check("memleak report reads the run", result["report_run"]["rc"] == 0)
    kept = snap_path is not None and (folder / snap_path.name).is_file()
    fixture_meta(
        folder,
        "a real CUDA OOM inside a tracked step, record_history=True",
        warm_steps=ctx.sizes["warm_steps"],
        model="Linear(1024, 16384) ReLU Linear(16384, 1024)",
        exception=_name(tracked),
        snapshot_in_fixture=kept,
    )
    return checks.result(f"OOM raised {_name(tracked)}; events {sorted(events)}", **result)
