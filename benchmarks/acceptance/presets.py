"""Sizes for each part: "cuda" for the real run (about 10 minutes on an H100 in all), "dry"
for the CPU dry run, "tiny" for the unit test of the run itself."""

from __future__ import annotations

import os

from memleak.schema import LEVELS  # the scenarios part checks each, auto (the default) included

MiB = 1 << 20

_CUDA: dict[str, dict] = {
    "allocator": {"steps": 60, "leak_bytes": 2 * MiB, "width": 1024, "batch": 64},
    "fragmentation": {"steps": 60, "worker_timeout": 60},
    "oom": {"warm_steps": 4},
    "snapshot": {
        "entries": 120_000,
        "stack_modes": ("python", "all"),
        "leak_count": 24,
        # (stacks, max_entries) tried in turn until the fixture pair fits its budget
        "fixture_tries": (("all", 1500), ("all", 500), ("python", 1500), ("python", 300)),
    },
    "headroom": {"width": 8192, "batch_sizes": (1024, 2048, 4096), "fourth": 16384},
    "overhead": {
        "d": 512,
        "layers": 6,
        "heads": 8,
        "seq": 256,
        "vocab": 8192,
        "batch": 16,
        "target_ms": 10,
        "steps": 120,  # past auto's 32 young steps: at 40 every step was young, auto read as full
        "rounds": 4,
        "compile": True,
        "backend": "inductor",
    },
    "scenarios": {
        "names": None,
        "steps": None,
        # the default level first: a run cut at its cap keeps the figures that matter most
        "levels": sorted(LEVELS, key=("auto", "full").__contains__, reverse=True),
        "workers": max(1, min(12, (os.cpu_count() or 2) - 2)),
    },
}

_DRY: dict[str, dict] = {
    **_CUDA,
    "snapshot": {"entries": 100_000, "segments": 2000, "leak_count": 24},  # synthetic, real-sized
    "headroom": {"width": 256, "batch_sizes": (32, 64, 128), "fourth": 512},
    "overhead": {
        "d": 32,
        "layers": 2,
        "heads": 4,
        "seq": 32,
        "vocab": 256,
        "batch": 8,
        "target_ms": None,
        "steps": 10,
        "rounds": 2,
        "compile": True,
        "backend": "eager",
    },
    "scenarios": {
        "names": ("leak_loss_history", "leak_module_cache", "benign_eval_no_grad"),
        "steps": None,
        "levels": LEVELS,
        "workers": 0,
    },
}

_TINY: dict[str, dict] = {
    **_DRY,
    "snapshot": {"entries": 2_000, "segments": 50, "leak_count": 4},
    "headroom": {"width": 64, "batch_sizes": (16, 32, 64), "fourth": 128},
    "overhead": {
        "d": 16,
        "layers": 1,
        "heads": 2,
        "seq": 8,
        "vocab": 32,
        "batch": 2,
        "target_ms": None,
        "steps": 2,
        "rounds": 1,
        "compile": False,
    },
    "scenarios": {"names": ("benign_eval_no_grad",), "steps": 6, "levels": ("counters",), "workers": 0},
}

PRESETS = {"cuda": _CUDA, "dry": _DRY, "tiny": _TINY}
