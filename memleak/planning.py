"""`memleak.headroom`: measure a step's peak at a few batch sizes (or take given peaks), fit
``peak = a + b * batch``, and answer the largest batch that fits and the accumulation that
keeps a target batch.

    result = memleak.headroom(train_step, batch_sizes=(8, 16, 32), target_batch=256)
    result = memleak.headroom(peaks={8: "1.2 GiB", 16: "2.1 GiB"}, capacity="80 GiB")
    print(result)          # the fit, the largest batch, the accumulation steps
    result.max_batch, result.accumulation_steps, result.predict(64)

    # an inference step at several sequence lengths: step_fn(batch_size, input_size)
    result = memleak.headroom(infer_step, batch_sizes=(8, 16), input_sizes=(512, 1024))
    result.max_batch(2048), result.predict(32, 2048)
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from .detect.headroom import Headroom, accumulation, fit_line, largest_batch
from .detect.headroom_inputs import InputHeadroom, fit_inputs
from .errors import MemleakError, UsageError
from .probes import is_oom
from .probes.peak import device_capacity, measure_peak
from .units import parse_bytes

DEFAULT_BATCH_SIZES = (8, 16, 32)


def headroom(
    step_fn: Callable[[int], Any] | None = None,
    batch_sizes: Iterable[int] = DEFAULT_BATCH_SIZES,
    *,
    peaks: Mapping[int, float | str] | None = None,
    capacity: float | str | None = None,
    margin: float = 0.1,
    target_batch: int | None = None,
    device: Any = None,
    warmup: int = 1,
    input_sizes: Iterable[int] | None = None,
    confirm: bool = False,
) -> Headroom | InputHeadroom:
    """Predict the largest batch that fits, from peaks measured (``step_fn(batch_size)``
    at each of `batch_sizes`) or given (``peaks={batch_size: bytes or "1.2 GiB"}``).

    `capacity` defaults to the device's (CUDA: free + held by this process; CPU: RAM
    available + this process's). `margin` is the share kept free:
    ``fit(batch) * (1 + margin) <= capacity``. With `target_batch`, the result also
    gives the gradient-accumulation steps and micro-batch that make it. The step may be
    a training or an inference step (the peak is what it is measured to be).

    With `input_sizes` (sequence lengths, image sides), ``step_fn(batch_size, input_size)``
    is measured at every pair, and the result is an `InputHeadroom`: the batch fit at each
    input size and ``max_batch(input_size)`` for any size, measured or not.

    With `confirm` (CUDA only), one real step runs at the fitted limit; if it runs out of
    memory, steps bisect down to the largest batch that runs (to 1 %), and `max_batch` is
    scaled to it. A fit from small batches can miss memory that only large ones need: on an
    H100 an MLP fitted at batches up to 4096 was predicted to fit 890,500, and 626,688 ran.
    """
    _check_options(step_fn, peaks, margin, target_batch)
    dev = _device(device)
    if input_sizes is not None:
        if peaks is not None:
            raise UsageError("input_sizes= measures with step_fn(batch_size, input_size); it takes no peaks=")
        return _by_input(step_fn, batch_sizes, input_sizes, capacity, margin, dev, warmup)
    if confirm and (peaks is not None or dev.type != "cuda"):
        raise UsageError(
            "confirm=True runs real steps up to an out-of-memory error: it needs step_fn and a CUDA device "
            "(on the CPU running out of memory can end the process instead of raising)"
        )
    if peaks is not None:
        points = {parse_batch(bs): parse_bytes(p) for bs, p in peaks.items()}
    else:
        points = _measure(step_fn, batch_sizes, dev, warmup)
    fit = _fit(points, _capacity(capacity, dev), margin, dev, peaks is None, target_batch)
    if not confirm:
        return fit
    assert step_fn is not None  # confirm takes no peaks=, and one of the two is given (_check_options)
    return confirm_limit(step_fn, fit, dev)


def _capacity(capacity: Any, dev: Any) -> float:
    cap = parse_bytes(capacity) if capacity is not None else device_capacity(dev)
    if cap <= 0:
        raise UsageError(f"capacity must be positive, not {capacity!r}")
    return cap


def _by_input(step_fn, batch_sizes, input_sizes, capacity, margin, dev, warmup) -> InputHeadroom:
    """The batch fit at each input size, then the model over input sizes."""
    sizes = sorted({parse_batch(s) for s in input_sizes})
    cap = _capacity(capacity, dev)
    fits = {}
    for size in sizes:
        points = _measure(lambda bs, size=size: step_fn(bs, size), batch_sizes, dev, warmup)
        fits[size] = _fit(points, cap, margin, dev, True, None)
    return fit_inputs(fits, cap, margin)


def _fit(points: dict[int, float], cap: float, margin: float, dev: Any, measured: bool, target_batch) -> Headroom:
    """The line through the peaks, the largest batch, the accumulation plan."""
    if len(points) < 2:
        raise UsageError("headroom needs peaks at two or more different batch sizes")
    a, b = fit_line(points)
    best = largest_batch(a, b, cap, margin)
    steps, micro = _accumulation_plan(target_batch, best)
    residuals = {bs: (p - (a + b * bs)) / p if p else 0.0 for bs, p in points.items()}
    return Headroom(
        peaks=dict(sorted(points.items())),
        intercept=a,
        slope=b,
        capacity=cap,
        margin=margin,
        max_batch=best,
        device=str(dev),
        measured=measured,
        target_batch=target_batch,
        accumulation_steps=steps,
        micro_batch=micro,
        residuals=residuals,
    )


def _check_options(step_fn: Any, peaks: Any, margin: float, target_batch: int | None) -> None:
    """UsageError for options headroom cannot work with, before anything is measured."""
    if (step_fn is None) == (peaks is None):
        raise UsageError("pass either step_fn (to measure peaks) or peaks={batch_size: bytes}, not both or neither")
    if not (0 <= margin < 10):
        raise UsageError(f"margin is a share such as 0.1 (10 %), not {margin!r}")
    if target_batch is not None and (int(target_batch) != target_batch or target_batch < 1):
        raise UsageError(f"target_batch must be a positive integer, not {target_batch!r}")


def _measure(step_fn: Any, batch_sizes: Iterable[int], dev: Any, warmup: int) -> dict[int, float]:
    """The peak of `step_fn(batch_size)` at each batch size, smallest first; an OOM says to
    measure at smaller ones."""
    if not callable(step_fn):
        raise UsageError("step_fn must be a function of the batch size")
    sizes = sorted({parse_batch(bs) for bs in batch_sizes})
    points = {}
    for bs in sizes:
        try:
            points[bs] = measure_peak(step_fn, bs, dev, warmup=warmup)
        except Exception as e:
            if is_oom(e):
                raise MemleakError(
                    f"batch size {bs} ran out of memory while measuring: measure at smaller batch sizes"
                ) from e
            raise
    return points


def confirm_limit(step_fn: Callable[[int], Any], fit: Headroom, dev: Any, tolerance: float = 0.01) -> Headroom:
    """`fit` checked with real steps: one at the fitted limit (no margin); if it runs out of
    memory, bisection between the largest batch measured and it, and the largest batch (with
    the margin) scaled to the per-sample memory that the batch that ran implies."""
    limit = largest_batch(fit.intercept, fit.slope, fit.capacity, 0.0)
    lo = max(fit.peaks)
    if limit is None or limit <= lo:
        return fit
    tries = 1
    if _runs(step_fn, limit, dev):
        return replace(fit, confirmed_batch=limit, confirm_tries=tries)
    hi = limit
    while hi - lo > max(1, int(tolerance * lo)):
        mid = (lo + hi) // 2
        tries += 1
        lo, hi = (mid, hi) if _runs(step_fn, mid, dev) else (lo, mid)
    per_sample = (fit.capacity - fit.intercept) / lo  # what a sample really costs at the limit
    best = min(fit.max_batch or lo, largest_batch(fit.intercept, per_sample, fit.capacity, fit.margin) or lo)
    steps, micro = _accumulation_plan(fit.target_batch, best)
    return replace(
        fit,
        max_batch=best,
        accumulation_steps=steps,
        micro_batch=micro,
        confirmed_batch=lo,
        oom_batch=hi,
        confirm_tries=tries,
    )


def _runs(step_fn: Callable[[int], Any], batch_size: int, dev: Any) -> bool:
    """Whether one step at `batch_size` runs without running out of memory (the cache emptied after)."""
    import torch

    try:
        step_fn(batch_size)
        torch.cuda.synchronize(dev)
        return True
    except Exception as e:
        if is_oom(e):
            return False
        raise
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def _accumulation_plan(target_batch: int | None, best: int | None) -> tuple[int | None, int | None]:
    """(accumulation steps, micro-batch) that make `target_batch` given the largest batch that
    fits; (None, None) without a target, or when not even one sample fits."""
    if target_batch is None:
        return None, None
    if best is None:
        return 1, int(target_batch)
    if best >= 1:
        return accumulation(int(target_batch), best)
    return None, None


def parse_batch(bs: Any) -> int:
    """A batch size as a positive int, from an int or a string; UsageError otherwise."""
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
