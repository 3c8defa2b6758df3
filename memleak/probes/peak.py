"""Peak memory of one call of a step function, on CUDA or CPU, for `memleak.headroom`.

Measuring calls ``step_fn(batch_size)`` once to warm up (optimizer state, lazy
modules, cuDNN plans) and once measured:

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``
  (resetting is fine here: headroom is a deliberate measurement, not passive
  observation of the user's run);
- CPU: the peak of the C heap in use (glibc ``mallinfo2``: CPU tensor storages
  live there), sampled by a thread while the call runs (torch releases the GIL in
  its kernels); RSS where glibc is not available.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from .host import heap_counter, host_memory_bytes, rss_bytes


def _heap_reader() -> tuple[Callable[[], int], str]:
    """A reader of the C heap in use, or of RSS where glibc's counter is missing, and its name."""
    heap = heap_counter()
    if heap is not None:
        return heap, "C heap in use (mallinfo2)"
    return (lambda: rss_bytes() or 0), "RSS"


class _HeapPeak:
    """Peak of the C heap in use (or RSS) while a block runs: read after every PyTorch
    operation (a dispatch mode sees the forward, the backward and the optimizer's ops,
    right after each allocates its outputs), and by a thread in between."""

    def __init__(self) -> None:
        self.read, self.what = _heap_reader()
        self.peak = 0
        self._stop = threading.Event()

    def _loop(self) -> None:
        read, stop, peak = self.read, self._stop, 0
        while not stop.wait(0.0005):
            v = read()
            if v > peak:
                peak = v
        self.peak = max(self.peak, peak)

    def __enter__(self) -> _HeapPeak:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class _Sample(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                v = outer.read()
                if v > outer.peak:
                    outer.peak = v
                return out

        self.peak = self.read()
        self._mode = _Sample()
        self._thread = threading.Thread(target=self._loop, name="memleak-headroom", daemon=True)
        self._thread.start()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._mode.__exit__(*exc)
        finally:
            self._stop.set()
            self._thread.join()
        self.peak = max(self.peak, self.read())


def measure_peak(step_fn: Callable[[int], Any], batch_size: int, device, warmup: int = 1, repeats: int = 1) -> float:
    """Peak bytes of ``step_fn(batch_size)`` on `device` (see the module docstring)."""
    import torch

    for _ in range(warmup):
        step_fn(batch_size)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        peak = 0.0
        for _ in range(repeats):
            torch.cuda.reset_peak_memory_stats(device)
            step_fn(batch_size)
            torch.cuda.synchronize(device)
            peak = max(peak, float(torch.cuda.max_memory_allocated(device)))
        return peak
    if device.type != "cpu":
        raise UsageError(f"headroom measures on CUDA or CPU, not {device.type}: pass peaks= measured there")
    peak = 0.0
    for i in range(repeats):
        if i:  # the last repeat's cyclic garbage must not raise this one's peak
            gc.collect()
        with _HeapPeak() as hp:
            step_fn(batch_size)
        peak = max(peak, float(hp.peak))
    return peak


def device_capacity(device) -> float:
    """Memory a peak on `device` may use: on CUDA what the driver reports free plus what
    this process's allocator holds; on CPU the host RAM available plus this process's heap."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free + torch.cuda.memory_reserved(device))
    total = host_memory_bytes()
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        return float(info["MemAvailable"] + (rss_bytes() or 0))
    except (OSError, KeyError, ValueError):
        if total is None:
            raise UsageError("cannot tell this machine's memory: pass capacity=") from None
        return float(total)
