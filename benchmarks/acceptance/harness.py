"""What every part shares: the context it runs in, its named checks, its time cap, and the
facts about the machine that go into results.json and each fixture's meta.json.

A part is a function ``run(ctx) -> dict`` returning at least ``status`` ("pass", "fail",
or "skipped: <why>") and ``summary`` (one line). The harness adds how long it took, turns
an exception into status "error" and a part that outlives its cap into "timeout", keeping
whatever the part had put in ``ctx.partial`` so far.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: Where fixtures go inside OUT_DIR: the same path as in the repository, so that
#: ``cp -r OUT_DIR/tests .`` puts them in place.
FIXTURES = Path("tests") / "data" / "gpu"
SKIPPED_NO_CUDA = "no CUDA"


class PartTimeout(BaseException):
    """Raised in a part when its cap runs out. A BaseException, so that the ``except
    Exception`` of the code under test (memleak's probes, an OOM handler) cannot swallow it."""


@dataclass
class Context:
    """What a part may know: where to write, whether CUDA is here, its sizes, its deadline."""

    out: Path
    cuda: bool
    dry_run: bool
    sizes: dict[str, Any]
    deadline: float = float("inf")  # time.monotonic() at which the part is stopped
    partial: dict[str, Any] = field(default_factory=dict)  # results so far, kept on a timeout

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def fixture_dir(self, name: str) -> Path:
        path = self.out / FIXTURES / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def new_fixture_dir(self, name: str) -> Path:
        """The fixture's folder, emptied: a second run into the same OUT_DIR must not leave two
        runs in one fixture (memleak never writes over a run; it would number the new one)."""
        shutil.rmtree(self.out / FIXTURES / name, ignore_errors=True)
        return self.fixture_dir(name)

    def work_dir(self, name: str) -> Path:
        """A scratch folder for a part's runs and pickles that are not fixtures."""
        path = self.out / "work" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


class Checks:
    """Named yes/no checks with the figures behind each: a part passes when all hold."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def check(self, name: str, ok: Any, **detail: Any) -> bool:
        self.items[name] = {"ok": bool(ok), **detail}
        return bool(ok)

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.items.items() if not v["ok"]]

    def result(self, summary: str, **details: Any) -> dict[str, Any]:
        status = "fail" if self.failed else "pass"
        tail = f" (failed: {', '.join(self.failed)})" if self.failed else ""
        return {"status": status, "summary": summary + tail, "checks": self.items, **details}


def skipped(why: str, **details: Any) -> dict[str, Any]:
    return {"status": f"skipped: {why}", "summary": why, **details}


def run_capped(fn: Callable[[Context], dict], ctx: Context, cap: float) -> dict[str, Any]:
    """`fn(ctx)` stopped after `cap` seconds (SIGALRM, in the main thread), its failure caught:
    one part never loses the others."""
    ctx.deadline = time.monotonic() + cap
    ctx.partial = {}
    use_alarm = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    old = None

    def on_alarm(signum, frame):
        raise PartTimeout(f"stopped at its cap of {cap:.0f} s")

    t0 = time.perf_counter()
    try:
        if use_alarm:
            old = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, max(cap, 0.001))
        result = fn(ctx)
    except PartTimeout as e:
        result = {"status": "timeout", "summary": str(e), "partial": ctx.partial}
    except Exception as e:
        lines = traceback.format_exc().splitlines()
        result = {"status": "error", "summary": f"{type(e).__name__}: {e}"[:300], "traceback": lines[-25:]}
        if ctx.partial:
            result["partial"] = ctx.partial
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["cap_s"] = round(cap, 1)
    return result


def write_json(path: Path, obj: Any) -> None:
    """Write atomically: a run killed mid-way leaves the previous whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _nvml_facts() -> dict[str, Any]:
    """Device name, driver and memory from NVML: no CUDA context is created for them."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:
        return {"nvml": f"unavailable: {e}"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        name, driver = pynvml.nvmlDeviceGetName(h), pynvml.nvmlSystemGetDriverVersion()
        return {
            "device": name.decode() if isinstance(name, bytes) else str(name),
            "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "device_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            "cuda_driver_api": pynvml.nvmlSystemGetCudaDriverVersion(),
        }
    except Exception as e:
        return {"nvml": f"failed: {e}"}
    finally:
        pynvml.nvmlShutdown()


def machine_facts() -> dict[str, Any]:
    """The device, driver, CUDA and torch versions (the keys every meta.json has)."""
    import torch

    import memleak

    facts: dict[str, Any] = {
        "device": "cpu",
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "memleak": memleak.__version__,
        "git_commit": _git_commit(),
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        facts.update(_nvml_facts())
        facts["cuda_device_count"] = torch.cuda.device_count()
        if facts["device"] == "cpu":  # no NVML: ask CUDA itself (this creates a context)
            facts["device"] = torch.cuda.get_device_name(0)
    return facts


def fixture_meta(folder: Path, what: str, **workload: Any) -> None:
    """The fixture's meta.json: the machine's facts, when, and what workload produced it."""
    meta = {
        **machine_facts(),
        "fixture": what,
        "recorded_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workload": workload,
    }
    write_json(folder / "meta.json", meta)


#: The memory_stats() read at each step boundary, beside a run: a JSON list, one step a line (not
#: .jsonl: memleak.load would take a .jsonl file in a run's folder for a run file).
STATS_FILE = "memory_stats.json"


def write_stats(folder: Path, rows: list[dict[str, int]]) -> None:
    lines = ",\n".join(json.dumps(r, sort_keys=True) for r in rows)
    (folder / STATS_FILE).write_text(f"[\n{lines}\n]\n")


def stat_keys(stats: dict[str, Any]) -> dict[str, int]:
    """A memory_stats() dict as plain ints (JSON-ready)."""
    return {k: int(v) for k, v in stats.items()}
