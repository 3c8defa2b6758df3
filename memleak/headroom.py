"""Headroom: the largest batch size that fits, from peaks measured at two or more batch sizes.

    result = memleak.headroom(train_step, batch_sizes=(8, 16, 32), target_batch=256)
    result = memleak.headroom(peaks={8: "1.2 GiB", 16: "2.1 GiB"}, capacity="80 GiB")
    print(result)          # the fit, the largest batch, the accumulation steps
    result.max_batch, result.accumulation_steps, result.predict(64)

The peak memory of a training step is, to a very good approximation, a constant
(parameters, gradients, optimizer state, workspace) plus a part proportional to
the batch (activations and inputs). memleak fits ``peak = a + b * batch`` to the
measured points (the exact line through two points; repeated medians, robust to
a bad point, through three or more) and predicts the largest batch whose peak,
plus the safety `margin`, fits in `capacity`. With `target_batch`, it gives the
gradient-accumulation steps (and the micro-batch) that keep that effective batch.

Measuring (`step_fn` given) calls ``step_fn(batch_size)`` at each batch size,
once to warm up (optimizer state, lazy modules, cuDNN plans) and once measured:

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``
  (resetting is fine here: headroom is a deliberate measurement, not passive
  observation of the user's run);
- CPU: the peak of the C heap in use (glibc ``mallinfo2``: CPU tensor storages
  live there), sampled by a thread while the call runs (torch releases the GIL in
  its kernels); RSS where glibc is not available.
"""
from __future__ import annotations

import argparse
import gc
import math
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .errors import MemleakError, UsageError
from .units import fmt_bytes, parse_bytes

DEFAULT_BATCH_SIZES = (8, 16, 32)


@dataclass(frozen=True)
class Headroom:
    """What `memleak.headroom` found. ``str()`` reads as a short report."""

    peaks: dict[int, float]           # batch size -> peak bytes (measured or given)
    intercept: float                  # a: bytes that do not depend on the batch
    slope: float                      # b: bytes per sample of the batch
    capacity: float                   # bytes the peak must fit in
    margin: float                     # safety share: fit(batch) * (1 + margin) <= capacity
    max_batch: int | None             # largest batch that fits; None when the peak does not grow with the batch
    device: str = "?"
    measured: bool = False            # peaks measured here (True) or given (False)
    target_batch: int | None = None
    accumulation_steps: int | None = None  # steps of micro_batch that make target_batch
    micro_batch: int | None = None
    residuals: dict[int, float] = field(default_factory=dict)  # batch -> (measured - fit) / measured

    def predict(self, batch_size: float) -> float:
        """The fitted peak at `batch_size`, in bytes (without the margin)."""
        return self.intercept + self.slope * float(batch_size)

    @property
    def effective_batch(self) -> int | None:
        if self.accumulation_steps is None or self.micro_batch is None:
            return None
        return self.accumulation_steps * self.micro_batch

    @property
    def usable(self) -> float:
        """Capacity left once the margin is set aside."""
        return self.capacity / (1.0 + self.margin)

    def to_dict(self) -> dict[str, Any]:
        return {"peaks": {str(k): v for k, v in self.peaks.items()}, "intercept": self.intercept,
                "slope": self.slope, "capacity": self.capacity, "margin": self.margin,
                "max_batch": self.max_batch, "device": self.device, "measured": self.measured,
                "target_batch": self.target_batch, "accumulation_steps": self.accumulation_steps,
                "micro_batch": self.micro_batch, "residuals": {str(k): v for k, v in self.residuals.items()}}

    def __str__(self) -> str:
        how = "measured" if self.measured else "given"
        where = f" on {self.device}" if self.measured else ""
        lines = [f"headroom{where}: capacity {fmt_bytes(self.capacity)}, safety margin {self.margin:.0%}"]
        pts = ", ".join(f"{bs} -> {fmt_bytes(p)}" for bs, p in sorted(self.peaks.items()))
        lines.append(f"  peaks {how}: {pts}")
        fit = f"  fit: peak = {fmt_bytes(self.intercept)} + {fmt_bytes(self.slope)} x batch"
        if len(self.peaks) > 2:
            worst = max(abs(r) for r in self.residuals.values()) if self.residuals else 0.0
            fit += f" (repeated medians over {len(self.peaks)} points; worst residual {worst:.1%})"
        lines.append(fit)
        if self.max_batch is None:
            lines.append("  the peak does not grow with the batch size: any batch fits as far as these "
                         "points tell; measure at larger batch sizes")
        elif self.max_batch < 1:
            lines.append(f"  no batch fits: the batch-independent part alone ({fmt_bytes(self.intercept)}) "
                         f"with the margin exceeds {fmt_bytes(self.usable)}")
        else:
            lines.append(f"  largest batch that fits: {self.max_batch} (predicted peak "
                         f"{fmt_bytes(self.predict(self.max_batch))}, {fmt_bytes(self.predict(self.max_batch) * (1 + self.margin))} "
                         f"with the margin, of {fmt_bytes(self.capacity)})")
            top = max(self.peaks)
            if self.max_batch > 4 * top:
                lines.append(f"  note: that is {self.max_batch / top:.0f}x the largest batch measured; "
                             "confirm with one step at that size")
        if self.target_batch is not None and self.accumulation_steps is not None:
            if self.accumulation_steps == 1:
                lines.append(f"  target batch {self.target_batch}: fits in one step, no gradient accumulation needed")
            else:
                eff = self.effective_batch
                extra = "" if eff == self.target_batch else f" (effective batch {eff}: no divisor fits)"
                lines.append(f"  target batch {self.target_batch}: {self.accumulation_steps} gradient-accumulation "
                             f"steps of {self.micro_batch}{extra}")
        return "\n".join(lines)


# ---------------------------------------------------------------- fit and prediction

def fit_line(peaks: Mapping[int, float]) -> tuple[float, float]:
    """(a, b) of peak = a + b * batch: the line through two points; through more, Siegel's
    repeated medians (the median over points of each point's median slope to the others),
    which one bad point in three, or almost half the points, cannot drag away."""
    xs = sorted(peaks)
    if len(xs) < 2:
        raise UsageError("headroom needs peaks at two or more different batch sizes")
    if len(xs) == 2:
        (x0, x1) = xs
        b = (peaks[x1] - peaks[x0]) / (x1 - x0)
        return peaks[x0] - b * x0, b
    b = _median([_median([(peaks[xj] - peaks[xi]) / (xj - xi) for xj in xs if xj != xi]) for xi in xs])
    a = _median([peaks[x] - b * x for x in xs])
    return a, b


def _median(v: list[float]) -> float:
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def largest_batch(a: float, b: float, capacity: float, margin: float) -> int | None:
    if b <= 0:
        return None
    return max(0, math.floor((capacity / (1.0 + margin) - a) / b + 1e-9))


def accumulation(target: int, max_batch: int) -> tuple[int, int]:
    """(steps, micro batch) with steps * micro == target and micro <= max_batch, fewest steps;
    when no divisor of target is small enough in few steps, the fewest steps that cover it."""
    if target <= max_batch:
        return 1, target
    first = -(-target // max_batch)
    for k in range(first, min(target, 4 * first) + 1):
        if target % k == 0:
            return k, target // k
    return first, -(-target // first)


# ---------------------------------------------------------------- measuring

def _heap_reader() -> tuple[Callable[[], int], str]:
    from .probes.host import heap_counter, rss_bytes
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

    def __enter__(self) -> "_HeapPeak":
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
    for _ in range(repeats):
        with _HeapPeak() as hp:
            step_fn(batch_size)
        peak = max(peak, float(hp.peak))
        gc.collect()
    return peak


def device_capacity(device) -> float:
    """Memory a peak on `device` may use: on CUDA what the driver reports free plus what
    this process's allocator holds; on CPU the host RAM available plus this process's heap."""
    import torch
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free + torch.cuda.memory_reserved(device))
    from .probes.host import host_memory_bytes
    total = host_memory_bytes()
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        from .probes.host import rss_bytes
        return float(info["MemAvailable"] + (rss_bytes() or 0))
    except (OSError, KeyError, ValueError):
        if total is None:
            raise UsageError("cannot tell this machine's memory: pass capacity=") from None
        return float(total)


def headroom(step_fn: Callable[[int], Any] | None = None, batch_sizes: Iterable[int] = DEFAULT_BATCH_SIZES, *,
             peaks: Mapping[int, float | str] | None = None, capacity: float | str | None = None,
             margin: float = 0.1, target_batch: int | None = None, device: Any = None,
             warmup: int = 1) -> Headroom:
    """Predict the largest batch that fits, from peaks measured (``step_fn(batch_size)``
    at each of `batch_sizes`) or given (``peaks={batch_size: bytes or "1.2 GiB"}``).

    `capacity` defaults to the device's (CUDA: free + held by this process; CPU: RAM
    available + this process's). `margin` is the share kept free:
    ``fit(batch) * (1 + margin) <= capacity``. With `target_batch`, the result also
    gives the gradient-accumulation steps and micro-batch that make it.
    """
    if (step_fn is None) == (peaks is None):
        raise UsageError("pass either step_fn (to measure peaks) or peaks={batch_size: bytes}, not both or neither")
    if not (0 <= margin < 10):
        raise UsageError(f"margin is a share such as 0.1 (10 %), not {margin!r}")
    if target_batch is not None and (int(target_batch) != target_batch or target_batch < 1):
        raise UsageError(f"target_batch must be a positive integer, not {target_batch!r}")
    dev = _device(device)
    if peaks is not None:
        points = {_batch(bs): parse_bytes(p) for bs, p in peaks.items()}
        measured = False
    else:
        if not callable(step_fn):
            raise UsageError("step_fn must be a function of the batch size")
        sizes = sorted({_batch(bs) for bs in batch_sizes})
        points = {}
        for bs in sizes:
            try:
                points[bs] = measure_peak(step_fn, bs, dev, warmup=warmup)
            except Exception as e:
                from .recorder import is_oom
                if is_oom(e):
                    raise MemleakError(f"batch size {bs} ran out of memory while measuring: measure at smaller "
                                       "batch sizes") from e
                raise
        measured = True
    if len(points) < 2:
        raise UsageError("headroom needs peaks at two or more different batch sizes")
    cap = parse_bytes(capacity) if capacity is not None else device_capacity(dev)
    if cap <= 0:
        raise UsageError(f"capacity must be positive, not {capacity!r}")
    a, b = fit_line(points)
    best = largest_batch(a, b, cap, margin)
    steps = micro = None
    if target_batch is not None:
        if best is None:
            steps, micro = 1, int(target_batch)
        elif best >= 1:
            steps, micro = accumulation(int(target_batch), best)
    residuals = {bs: (p - (a + b * bs)) / p if p else 0.0 for bs, p in points.items()}
    return Headroom(peaks=dict(sorted(points.items())), intercept=a, slope=b, capacity=cap, margin=margin,
                    max_batch=best, device=str(dev), measured=measured, target_batch=target_batch,
                    accumulation_steps=steps, micro_batch=micro, residuals=residuals)


def _batch(bs: Any) -> int:
    try:
        if isinstance(bs, bool) or (isinstance(bs, float) and not bs.is_integer()):
            raise ValueError
        v = int(bs.strip()) if isinstance(bs, str) else int(bs)
    except (TypeError, ValueError):
        raise UsageError(f"a batch size is a positive integer, not {bs!r}") from None
    if v < 1:
        raise UsageError(f"a batch size is a positive integer, not {bs!r}")
    return v


def _device(device: Any):
    import torch
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


# ---------------------------------------------------------------- command line

def _parse_peaks(text: str) -> dict[int, float]:
    peaks: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        bs, sep, size = part.partition("=")
        if not sep:
            raise UsageError(f"--peaks takes BATCH=SIZE pairs separated by commas (8=1.2GiB,16=2.1GiB), not {part!r}")
        peaks[_batch(bs.strip())] = parse_bytes(size)
    return peaks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Predict the largest batch size that fits from peaks measured at two or more batch "
                          "sizes (peak = a + b x batch), and the gradient-accumulation steps for a target batch.")
    parser.add_argument("--peaks", required=True, metavar="B=SIZE,...",
                        help="peak memory at each batch size, e.g. 8=1.2GiB,16=2.1GiB (binary units; plain bytes too)")
    parser.add_argument("--capacity", help="memory the peak must fit in, e.g. 80GiB (default: this machine's "
                                           "GPU, or its RAM without one)")
    parser.add_argument("--margin", type=float, default=0.1, help="safety share kept free (default: %(default)s)")
    parser.add_argument("--target-batch", type=int, help="effective batch to reach with gradient accumulation")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    result = headroom(peaks=_parse_peaks(args.peaks), capacity=args.capacity, margin=args.margin,
                      target_batch=args.target_batch)
    if args.json:
        import json
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result)
    return 0


class _CallableModule(types.ModuleType):
    """Importing ``memleak.headroom`` (the CLI does) makes the package attribute this module,
    not the function: calling the module calls the function, so ``memleak.headroom(...)``
    works either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> Headroom:
        return headroom(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
