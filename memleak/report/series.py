"""The numbers the pictures draw, taken out of a run once: memory lines, the memory by
category with the top holders stacked on it, each holder over steps, the per-module table,
and `downsample`, which keeps a long series drawable without losing its spikes.

No plotting library here: the matplotlib plots (`plots.py`) and the HTML page (`figures.py`,
`html.py`) draw the same series.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..run import own_adjusted, step_axis
from ..schema import HOST_COLUMNS, OWN_COLUMN, Kind
from .holder_lines import holder_series

#: Points a drawn series keeps at most (min and max of each of half as many buckets).
MAX_POINTS = 2000
#: Lines of the memory picture: the allocator's when present, else the host counters.
DEVICE_LINES = ("allocated_bytes", "reserved_bytes", "device_total_bytes")
HOST_LINES = ("heap_bytes", "tensor_bytes", "rss_bytes")
LABELS = {
    "allocated_bytes": "allocated",
    "reserved_bytes": "reserved",
    "device_total_bytes": "device total",
    "heap_bytes": "C heap",
    "tensor_bytes": "live tensors",
    "rss_bytes": "process RSS",
}
#: The categories a `modules` record carries, in stacking order, and their labels.
CATEGORIES = (
    ("parameter", "parameters"),
    ("buffer", "buffers"),
    ("gradient", "gradients"),
    ("optimizer_state", "optimizer state"),
)
REST = "activations/other"
#: One colour per category in every picture; holders take PALETTE in order.
CATEGORY_COLORS = {
    "parameters": "#4c78a8",
    "buffers": "#9ecae9",
    "gradients": "#f58518",
    "optimizer state": "#eeca3b",
    REST: "#d5d0cc",
}
PALETTE = ("#e45756", "#54a24b", "#b279a2", "#ff9da6", "#9d755d", "#72b7b2", "#d67195", "#79706e")


def downsample(x, y, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most about `max_points` points of (x, y) for drawing: the finite points split into
    max_points/2 buckets, of each its minimum and its maximum in step order (so a one-step
    spike survives), plus the first and the last point. Short series come back whole."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(y)
    if not keep.all():
        x, y = x[keep], y[keep]
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)  # ceil
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    rows = padded.reshape(buckets, size)
    start = np.arange(buckets) * size
    lo = start + np.argmin(np.where(np.isnan(rows), np.inf, rows), axis=1)
    hi = start + np.argmax(np.where(np.isnan(rows), -np.inf, rows), axis=1)
    idx = np.unique(np.concatenate([[0, n - 1], lo[lo < n], hi[hi < n]]))
    return x[idx], y[idx]


def column(steps: pd.DataFrame, name: str) -> np.ndarray | None:
    """A step column as floats, or None when absent or all NaN. The host series are drawn less
    memleak's own bytes (`memleak_bytes`: its bookkeeping, the detector it imports mid-run), as
    the detectors judge them: the user's memory, without a jump that is memleak's."""
    if name not in steps:
        return None
    v = own_adjusted(steps, name, np.asarray(steps[name], dtype=float))
    return v if np.isfinite(v).any() else None


def memory_lines(run) -> list[tuple[str, np.ndarray]]:
    """(label, values) of the memory lines: allocated, reserved and the device total when the
    run has an allocator, else the host counters (C heap, live tensors; RSS when neither)."""
    steps = run.steps
    names = [n for n in DEVICE_LINES[:2] if column(steps, n) is not None]
    if names:
        lines = [(LABELS[n], v) for n in names if (v := column(steps, n)) is not None]
        total = column(steps, "device_total_bytes")
        if total is None and run.meta.get("device_total_bytes"):  # recorded once, in the header
            total = np.full(len(steps), float(run.meta["device_total_bytes"]))
        return lines + ([(LABELS["device_total_bytes"], total)] if total is not None else [])
    names = [n for n in HOST_LINES[:2] if column(steps, n) is not None] or [
        n for n in HOST_LINES[2:] if column(steps, n) is not None
    ]
    return [(LABELS[n], v) for n in names if (v := column(steps, n)) is not None]


def diverging(divergences) -> dict[int, str]:
    """Each rank that diverges, with how: "leaks_alone", "holds_more" or both."""
    out: dict[int, list[str]] = {}
    for d in divergences:
        out.setdefault(d.rank, []).append(d.kind.value)
    return {rank: ", ".join(kinds) for rank, kinds in out.items()}


def rest_label(suspects=()) -> str:
    """The rest layer's label. Where a suspect keeps autograd graphs, the tensors those graphs saved
    for backward are in it, not in the holder's layer (a walk counts a graph's nodes, not the bytes
    they saved), and the label says so; likewise where a profiler keeps its events (host memory
    no walk reaches)."""
    suspects = list(suspects or ())
    keepers = [s.location for s in suspects if s.kind == Kind.RETAINED_GRAPH]
    if keepers:
        return f"{REST} (with what the graphs {keepers[0]} keeps saved)"
    if any(s.kind == Kind.PROFILER and s.leak for s in suspects):
        return f"{REST} (with the events torch.profiler keeps)"
    return REST


def layer_colors(labels: list[str], holders: list[str]) -> list[str]:
    """The colour of each stacked layer: its category's, else its holder's (`holder_color`)."""
    return [
        CATEGORY_COLORS[REST] if is_rest(label) else CATEGORY_COLORS.get(label) or holder_color(holders, label)
        for label in labels
    ]


def is_rest(label: str) -> bool:
    """Whether a layer's label is the rest's (`rest_label`)."""
    return label.startswith(REST)


def holder_color(holders: list[str], name: str) -> str:
    """A holder's colour, the same in every picture: by its place among the top holders."""
    return PALETTE[(holders.index(name) if name in holders else len(holders)) % len(PALETTE)]


def categories(
    run, holders: list[str], keep: tuple[str, ...] = (), min_share: float = 0.01, rest: str = REST
) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
    """Memory by category at the detail steps and the walks after them, in stacking order: the rest
    up to the total (the records' counter, else the run's memory column) at the bottom, then
    parameters, buffers, gradients, optimizer state (from the `modules` records; after the last, as
    it recorded them), then the named holders
    that ever hold `min_share` of the total (a tenth of that for those in `keep`), on top,
    beside the line they make grow; the rest is labelled `rest` (`rest_label`).
    ([], []) when the run has neither categories nor holders."""
    emptied = _traced_steps(run)
    records = [r for r in getattr(run, "module_records", []) if r.categories and r.step not in emptied]
    walks = holder_series(run, holders, births=False) if holders else {}
    if records:
        x = np.array([r.step for r in records], dtype=float)
        layers = [(label, np.array([r.categories.get(k, 0) for r in records], dtype=float)) for k, label in CATEGORIES]
        layers = [(label, v) for label, v in layers if v.any()]
        total = np.array([r.categories.get("total", np.nan) for r in records], dtype=float) - _own_at(run, x)
        # walks after the last detail step (level auto's checks): the categories as last recorded,
        # and the records' counter (glibc's arena alone on CPU, not the memory column) moved as the
        # memory column moved since the last record
        later = np.array(sorted({s for t in walks.values() for s in t["step"] if s > x[-1]}), dtype=float)
        at = np.append(x[-1], later)
        mem = _total_at(run, at)  # a host column comes less memleak's own bytes already (`column`)
        if len(later) and np.isfinite(mem).all():
            layers = [(label, np.concatenate([v, np.full(len(later), v[-1])])) for label, v in layers]
            total = np.concatenate([total, total[-1] + mem[1:] - mem[0]])
            x = np.concatenate([x, later])
    elif walks:
        x = np.asarray(next(iter(walks.values()))["step"], dtype=float)
        layers, total = [], _total_at(run, x)
    else:
        return np.array([]), []
    floor = min_share * np.nanmax(total) if np.isfinite(total).any() else 0.0
    for name, table in walks.items():
        v = _at_steps(table, x)
        if v.max() > (0.1 if name in keep else 1.0) * floor:
            layers.append((name, v))
    if np.isfinite(total).any():
        below = np.sum([v for _, v in layers], axis=0) if layers else np.zeros(len(x))
        layers.insert(0, (rest, np.clip(total - below, 0, None)))
    return x, layers


def _traced_steps(run) -> set[int]:
    """The steps whose host reads were emptied while tracemalloc traced (recorder/heap_reads.py):
    a `modules` record's counter read there carries tracemalloc's tables (a jump of the stack
    above the heap line, over the steps of a window)."""
    col = "heap_bytes"
    if col not in run.steps or run.memory_column() != col:
        return set()
    values = run.steps[col].to_numpy(dtype=float)
    if not np.isfinite(values).any():
        return set()
    return {int(s) for s in run.steps["step"].to_numpy()[~np.isfinite(values)]}


def stack_floor(layers: list[tuple[str, np.ndarray]], lines: list[np.ndarray]) -> float:
    """Where the memory axis under a stack starts: at zero, unless the rest at the bottom of the
    stack and every line stay far above it (a big, constant heap): then just under the lowest
    of them, so that the layers that change stay readable."""
    if not layers or not is_rest(layers[0][0]):
        return 0.0
    finite = [v[np.isfinite(v)] for v in lines if np.isfinite(v).any()]
    low = min([float(layers[0][1].min()), *(float(v.min()) for v in finite)])
    high = max([float(np.sum([v for _, v in layers], axis=0).max()), *(float(v.max()) for v in finite)])
    return 0.0 if low < 0.5 * high else low - 0.1 * (high - low)


def _at_steps(table: pd.DataFrame, x: np.ndarray) -> np.ndarray:
    """A holder's bytes at steps `x`: the last walk at or before each step (0 before the first)."""
    steps, values = table["step"].to_numpy(), table["bytes"].to_numpy()
    i = np.searchsorted(steps, x, side="right") - 1
    return np.where(i >= 0, values[np.clip(i, 0, None)], 0.0) if len(steps) else np.zeros(len(x))


def _total_at(run, x: np.ndarray) -> np.ndarray:
    col = run.memory_column() if hasattr(run, "memory_column") else None
    v = None if col is None else column(run.steps, col)
    if v is None or not len(x):
        return np.full(len(x), np.nan)
    return _interp(run, x, v)


def _own_at(run, x: np.ndarray) -> np.ndarray:
    """memleak's own bytes at steps `x` where the run's memory is a host series (the module
    records' total is then the raw counter), else 0."""
    col = run.memory_column() if hasattr(run, "memory_column") else None
    own = column(run.steps, OWN_COLUMN) if col in HOST_COLUMNS else None
    return np.zeros(len(x)) if own is None or not len(x) else _interp(run, x, own)


def _interp(run, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`v` (a step column, NaN where not read) at steps `x`."""
    ok = np.isfinite(v)
    return np.interp(x, step_axis(run.steps)[ok], v[ok])


def fragmentation_lines(steps: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """Memory the allocator caches without using: inactive split bytes, reserved - allocated."""
    out = []
    split = column(steps, "inactive_split_bytes")
    if split is not None:
        out.append(("inactive split", split))
    reserved, allocated = column(steps, "reserved_bytes"), column(steps, "allocated_bytes")
    if reserved is not None and allocated is not None:
        out.append(("reserved - allocated", reserved - allocated))
    return out


WORKER_SERIES = (("rss", "RSS"), ("private", "private"))


def worker_lines(steps: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """Each DataLoader worker's RSS and private memory, where recorded (``worker0_rss_bytes``...):
    sampled series, drawn through the steps that read them."""
    out = []
    for i in range(64):
        found = [(f"worker {i} {label}", column(steps, f"worker{i}_{key}_bytes")) for key, label in WORKER_SERIES]
        if all(v is None for _, v in found) and f"worker{i}_pss_bytes" not in steps:
            break
        out += [(label, v) for label, v in found if v is not None]
    return out


MODULE_COLUMNS = ["module", "calls/step", "forward", "backward", "left at step end", "kept 2+ steps"]


def module_table(run) -> pd.DataFrame:
    """Per module over the detail steps: calls per step, the bytes its forward and backward
    allocate per step (means over the steps that measured them), what its forward leaves alive
    at step end, and the outputs still alive two or more steps later (at the last record)."""
    records = [r for r in getattr(run, "module_records", []) if r.modules]
    if not records:
        return pd.DataFrame(columns=MODULE_COLUMNS)
    nan = float("nan")
    rows = pd.DataFrame(
        [  # forward and backward bytes from the detail steps that read them (`counter` names the reading)
            (
                m.path,
                m.calls / max(r.steps, 1),
                m.fwd_bytes if r.counter else nan,
                m.bwd_bytes if r.counter else nan,
                m.left_bytes,
            )
            for r in records
            for m in r.modules
        ],
        columns=MODULE_COLUMNS[:5],
    )
    table = rows.groupby("module", sort=False).mean()
    kept: dict[str, float] = {}
    for out in records[-1].alive:
        kept[out.path] = kept.get(out.path, 0.0) + out.bytes
    table["kept 2+ steps"] = [kept.get(m, 0.0) for m in table.index]
    return table.reset_index()


#: The OOM projection is drawn to scale only when it lands within this many run lengths.
MAX_PROJECTION = 4.0
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def binary_scale(largest: float) -> tuple[float, str]:
    """The binary unit that shows `largest` as a number below 1024: (divisor, unit)."""
    exponent = 0
    while exponent < len(_UNITS) - 1 and abs(largest) >= 1024 ** (exponent + 1):
        exponent += 1
    return float(1024**exponent), _UNITS[exponent]


def growth_lines(growth, x: np.ndarray) -> dict | None:
    """What to draw of a growth verdict over steps `x`: the fitted trend over the analysed
    steps (`fit`), the end of the warm-up (`warmup`, a step, or None), and for a leak with an
    OOM ahead the projection (`ahead`), the step it reaches the capacity (`oom`), whether that
    is drawn to scale (`to_scale`: within MAX_PROJECTION run lengths) and `capacity`. None when
    the series had nothing to fit."""
    if growth is None or not len(x) or str(growth.shape) in ("no_data", "too_short"):
        return None
    start = min(int(growth.warmup_steps), len(x) - 1)
    x0, x1 = float(x[start]), float(x[-1])
    line = lambda xs: (np.asarray(xs, dtype=float), growth.intercept + growth.slope * np.asarray(xs, dtype=float))
    out: dict = {"fit": line([x0, x1]), "warmup": x0 if growth.warmup_steps > 0 else None, "ahead": None}
    steps_to_full = growth.steps_to_full
    if growth.leak and steps_to_full is not None and np.isfinite(steps_to_full):
        oom = x1 + float(steps_to_full)
        span = max(x1 - float(x[0]), 1.0)
        to_scale = oom - x1 <= MAX_PROJECTION * span
        # to scale, a far-off OOM would squash the run into a sliver: then extend a little and say where
        out.update(
            ahead=line([x1, oom] if to_scale else [x1, x1 + 0.25 * span]),
            oom=oom,
            to_scale=to_scale,
            capacity=growth.capacity_bytes,
        )
    return out


def graph_growth(findings) -> dict[str, float]:
    """Autograd nodes added per step to the graph each location holds, where a detector
    measured it: the evidence of a retained graph whose own tensors weigh next to nothing."""
    out: dict[str, float] = {}
    for f in findings or ():
        data = f.data if isinstance(f.data, dict) else {}
        rate = data.get("nodes_per_step")
        nodes, steps = data.get("nodes"), data.get("steps")
        if rate is None and isinstance(nodes, list) and isinstance(steps, list) and len(nodes) == len(steps) >= 2:
            span = float(steps[-1]) - float(steps[0])
            rate = (float(nodes[-1]) - float(nodes[0])) / span if span > 0 else None
        if rate is not None and np.isfinite(rate) and rate > 0:
            out[f.location] = max(out.get(f.location, 0.0), float(rate))
    return out
