"""Where a run's file goes (one per rank) and the header that describes the run."""

from __future__ import annotations

import gc
import os
import platform
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..io import RUN_SUFFIX
from ..probes.identity import local_nbytes, original_module


def rank() -> tuple[int, int]:
    """(rank, world size): from torch.distributed once initialised, else from the environment."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def run_file_path(out: str | os.PathLike) -> Path:
    """`out` may name a folder (the run file goes inside) or a .jsonl file."""
    out = Path(out)
    if out.suffix == RUN_SUFFIX:
        return out
    rank_, world = rank()
    return out / (f"run-rank{rank_}-of{world}{RUN_SUFFIX}" if world > 1 else f"run{RUN_SUFFIX}")


def base_meta(
    device: torch.device, level: str, budget_bytes: float | None, model: torch.nn.Module | None
) -> dict[str, Any]:
    """The header fields every run has, before each probe adds its own."""
    rank_, world = rank()
    return {
        "memleak_version": __version__,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "device": str(device),
        "level": level,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": rank_,
        "world_size": world,
        "start_time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "budget_bytes": budget_bytes,
        "model": type(original_module(model)).__name__ if model is not None else None,
        "parameter_bytes": sum(local_nbytes(p) for p in model.parameters()) if model is not None else None,
        # a program that turned the cyclic collector off keeps every reference cycle it makes (culprits.py)
        "gc_enabled": gc.isenabled(),
    }
