"""Growth in DataLoader workers: copy-on-read (each worker's private memory grows toward a copy
of the Dataset's Python objects), or memory the workers allocate and keep (their RSS grows: a
cache the Dataset fills in ``__getitem__``).

Pure over the ``worker{i}_rss_bytes`` and ``worker{i}_private_bytes`` columns
(``worker{i}_pss_bytes`` in runs recorded before private memory was) and the
``dataloader_workers`` events (which DataLoader, its epoch length, which columns its workers
write; probes/workers.py). One set of workers is one segment of steps, from the event that
announced it to the next set of the same loader (non-persistent workers start afresh each
epoch). A segment whose workers' memory grows steadily (detect/growth.py's test, on each
worker's series) is reported, with the growth per worker and a projection to the end of the
epoch against the host's memory. RSS is judged first: copy-on-read does not move it (the copied
pages were resident already), so a worker whose RSS grows keeps memory of its own. It is a leak
when the projection exceeds the host's memory, or when the growth goes on past a whole epoch (by
then every object was touched: more than a copy is growing); otherwise a finding to know.

Private memory, not PSS, is judged for copy-on-read: a worker's PSS carries its share of the main
process's pages, so in a large main process the copy is a small part of a large level and falls
under the growth test's share of the level."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..run import Run
from ..schema import Finding, Kind, to_jsonable
from ..units import fmt_bytes
from .growth import MIN_POINTS, Growth, analyze_growth
from .thresholds import MIN_REL_GROWTH_HOST

NAME = "workers"
EVENT = "dataloader_workers"
#: A worker's private memory also settles by a few hundred KiB while it runs (its allocator, the
#: interpreter objects it touches once); a copy of a Dataset worth reporting is megabytes.
MIN_PRIVATE_RISE = 1 << 20

_COPY_ON_READ = (
    "copy-on-read: the workers were forked, and each copies the pages of the Dataset's Python objects as "
    "it touches their reference counts, so its private memory grows toward a whole copy"
)


class Series(NamedTuple):
    """One series the workers are judged on: its name in the growth line and in the projection,
    what the projection on it is (empty: exact), and what its growth means."""

    name: str
    short: str
    bound: str
    why: str


SERIES = {
    "rss": Series(
        "resident set size (RSS)",
        "RSS",
        " at most (each worker's RSS counts the pages it shares with this process again)",
        "copy-on-read leaves RSS flat (a copied page was resident already), so the workers allocate memory "
        "of their own and keep it",
    ),
    "private": Series("private memory (pages no other process maps)", "private memory", "", _COPY_ON_READ),
    "pss": Series(
        "proportional set size (PSS)",
        "PSS",
        " at most (PSS counts the pages the workers share with this process twice)",
        _COPY_ON_READ,
    ),
}

FIX = (
    "Keep the Dataset's data in a few large objects instead of many Python ones: numpy arrays "
    "(np.array of numbers, or of fixed-width strings), an Arrow table (pyarrow, Hugging Face datasets) or "
    "torch tensors. Touching one of them touches one reference count, so the workers share the data "
    "instead of each copying it page by page. Failing that, use fewer workers (each makes its own copy), "
    "and persistent_workers=True so the copies are not made again every epoch."
)
OWN_FIX = (
    "Something in the workers keeps what it makes: a cache the Dataset fills in __getitem__ "
    "(`self.cache[i] = sample`: each worker fills its own copy, and it lives as long as the worker), a "
    "collate_fn or worker_init_fn that appends to a list. Bound the cache (`functools.lru_cache(maxsize=...)`, "
    "an LRU dict), cache encoded bytes or a memory-mapped file instead of decoded tensors, or decode on "
    "every call; persistent_workers=False frees the workers' caches at each epoch's end."
)


def detect(run: Run) -> list[Finding]:
    findings = []
    for ev, rows in _segments(run):
        f = _judge(run, ev, rows)
        if f is not None:
            findings.append(f)
    return findings


def _segments(run: Run) -> list[tuple[dict, np.ndarray]]:
    """(event, row positions) of each set of workers: from its event to the next of its loader."""
    events = [e for e in run.events if e.get("event") == EVENT and isinstance(e.get("columns"), list)]
    if not events or "step" not in run.steps:
        return []
    step = np.asarray(run.steps["step"], dtype=float)
    out = []
    for k, ev in enumerate(events):
        later = [e["step"] for e in events[k + 1 :] if e.get("loader") == ev.get("loader")]
        end = later[0] if later else np.inf
        out.append((ev, np.flatnonzero((step >= float(ev.get("step", 0))) & (step < end))))
    return out


def _columns(run: Run, ev: dict) -> tuple[list[str], str]:
    """The workers' copy-on-read columns to judge, and which series they are: "private", or "pss"
    in a run recorded before private memory was."""
    private = [c for c in ev.get("private_columns") or () if isinstance(c, str) and c in run.steps]
    if private:
        return private, "private"
    return [c for c in ev["columns"] if isinstance(c, str)], "pss"


def _growing(run: Run, ev: dict, rows: np.ndarray) -> tuple[list[str], str, dict[str, Growth]]:
    """The series that grows, its columns and each growing worker's growth. RSS first: copy-on-read
    leaves it flat, so a worker whose RSS grows allocates memory of its own; else the private
    memory (or PSS), where copy-on-read shows."""
    rss = [c for c in ev.get("rss_columns") or () if isinstance(c, str) and c in run.steps]
    columns, series = _columns(run, ev)
    for cols, name in ((rss, "rss"), (columns, series)):
        growing = {c: g for c in cols if (g := _grows(run, c, rows)) is not None}
        if growing:
            return cols, name, growing
    return columns, series, {}


def _growth(run: Run, column: str, rows: np.ndarray) -> Growth | None:
    """detect/growth.py's verdict on one worker's series over `rows`, or None without it."""
    if column not in run.steps or len(rows) < MIN_POINTS:
        return None
    part = Run(run.meta, run.steps.iloc[rows][["step", "time", column]].reset_index(drop=True))
    # like RSS, a worker's memory creeps as this process writes pages it shared with the workers:
    # only a rise of a few percent of the level counts, and for private memory at least a MiB
    min_rel = MIN_REL_GROWTH_HOST
    values = part.steps[column].dropna()
    level = float(values.abs().median()) if len(values) else 0.0
    if column.endswith("_private_bytes") and level > 0:
        min_rel = max(min_rel, MIN_PRIVATE_RISE / level)
    elif column.endswith("_rss_bytes") and level > 0:
        # a worker's RSS counts every page it shares with this process: beside a large main process
        # its own memory is a small part of a large level, so only the rise itself counts
        min_rel = MIN_PRIVATE_RISE / level
    return analyze_growth(part, column, min_rel=min_rel)


def _grows(run: Run, column: str, rows: np.ndarray) -> Growth | None:
    """One worker's growth over `rows` where it grows steadily (a leak's shape, rising), else None."""
    g = _growth(run, column, rows)
    return g if g is not None and g.leak and g.slope > 0 else None


def _judge(run: Run, ev: dict, rows: np.ndarray) -> Finding | None:
    columns, series, growing = _growing(run, ev, rows)
    if not growing:
        return None
    steps = run.steps
    start, last = float(ev.get("step", 0)), float(steps["step"].iloc[rows[-1]])
    epoch = ev.get("steps_per_epoch")
    levels = {c: float(steps[c].iloc[rows].dropna().iloc[-1]) for c in columns if steps[c].iloc[rows].notna().any()}
    slopes = {c: (growing[c].slope if c in growing else 0.0) for c in levels}
    projected = _projection(run, levels, slopes, epoch, start, last)
    host = run.meta.get("host_memory_bytes")
    over = projected is not None and isinstance(host, (int, float)) and projected > float(host)
    past = _past_epoch(run, columns, rows, epoch, start)
    name = str(ev.get("loader", "a DataLoader"))
    beyond = series != "rss" and _beyond_copy(run, ev, growing, rows)
    copies = ev.get("start_method") in (None, "fork") and series != "rss" and not beyond  # copy-on-read
    evidence = [_growth_line(ev, name, growing, levels, last - start + 1, series, beyond)]
    if projected is not None:
        evidence.append(_projection_line(projected, _main_rss(run), epoch, start, last, host, series))
    elif not epoch:
        evidence.append("the epoch's length is unknown (the loader's sampler has no length): no projection")
    evidence += _verdict_lines(over, past, epoch)
    bps = sum(g.slope for g in growing.values())
    return Finding(
        detector=NAME,
        kind=Kind.HOST_GROWTH,
        location=f"{name} (DataLoader workers)",
        bytes_per_step=bps,
        total_bytes=bps * (last - start),
        confidence=max(g.confidence for g in growing.values()),
        evidence=tuple(evidence),
        fix=FIX if copies else OWN_FIX,
        leak=over or past,
        note=not (over or past),
        data=to_jsonable(
            {
                "loader": name,
                "series": series,
                "per_worker_slope": {c: g.slope for c, g in growing.items()},
                "projected_bytes": projected,
                "host_memory_bytes": host,
                "steps_per_epoch": epoch,
                "past_epoch": past,
            }
        ),
    )


def _verdict_lines(over: bool, past: bool, epoch) -> list[str]:
    """Why it is a leak, if it is."""
    lines = []
    if over:
        lines.append(
            "that is more than the host's memory: the run is killed (host out of memory) before the epoch ends"
        )
    if past:
        lines.append(
            f"the workers kept growing after a whole epoch ({epoch} steps), when every object was already "
            "touched: more than a copy of the dataset grows"
        )
    return lines


def _projection(run: Run, levels, slopes, epoch, start: float, last: float) -> float | None:
    """Host memory at the end of the epoch: this process's RSS now (every page it shares with
    the workers, counted once) plus each worker's series grown at its rate until then. With
    private memory that is the total; with PSS (older runs) shared pages count twice: a bound."""
    if not epoch or not levels:
        return None
    left = max(0.0, start + float(epoch) - 1 - last)
    return _main_rss(run) + sum(levels[c] + slopes[c] * left for c in levels)


def _main_rss(run: Run) -> float:
    """This process's last recorded RSS (0 without one)."""
    rss = run.steps["rss_bytes"].dropna() if "rss_bytes" in run.steps else None
    return float(rss.iloc[-1]) if rss is not None and len(rss) else 0.0


def _past_epoch(run: Run, columns: list[str], rows: np.ndarray, epoch, start: float) -> bool:
    """Whether a worker still grows after one whole epoch of the same workers."""
    if not epoch:
        return False
    step = np.asarray(run.steps["step"], dtype=float)[rows]
    later = rows[step >= start + float(epoch)]
    return any(_grows(run, c, later) is not None for c in columns)


def _beyond_copy(run: Run, ev: dict, growing: dict[str, Growth], rows: np.ndarray) -> bool:
    """Whether a worker grew by more than copy-on-read could copy into it: reading an object
    copies at most the page its reference count is on, so at most one page per Python object the
    Dataset holds (`dataset_objects`, counted by the probe: null past its cap, absent in older
    runs) on a page of `page_bytes`."""
    objects, page = ev.get("dataset_objects"), ev.get("page_bytes")
    if not isinstance(objects, int) or not isinstance(page, int):
        return False
    for c in growing:
        values = run.steps[c].iloc[rows].dropna()
        if len(values) and float(values.iloc[-1] - values.iloc[0]) > 2 * page * max(objects, 1) + MIN_PRIVATE_RISE:
            return True
    return False


def _growth_line(
    ev: dict, name: str, growing: dict[str, Growth], levels, n_steps: float, series: str, beyond: bool = False
) -> str:
    size = f", {ev['dataset_len']:,} items" if isinstance(ev.get("dataset_len"), int) else ""
    each = "; ".join(
        f"{c.split('_')[0]} {fmt_bytes(g.slope, signed=True)}/step (to {fmt_bytes(levels.get(c))})"
        for c, g in growing.items()
    )
    what, why = SERIES[series].name, SERIES[series].why
    if beyond:
        why = (
            f"more than copy-on-read can copy: the Dataset holds {ev.get('dataset_objects'):,} Python objects, at "
            "most a page each, so the workers allocate memory of their own and keep it"
        )
    elif series != "rss" and ev.get("start_method") not in (None, "fork"):
        why = f"the workers were started with {ev.get('start_method')}, so this is their own growth"
    return (
        f"the {len(levels)} worker processes of DataLoader `{name}` (over {ev.get('dataset', '?')}{size}) grew "
        f"over {n_steps:.0f} steps, in {what}: {each}; {why}"
    )


def _projection_line(projected, main: float, epoch, start, last, host, series: str) -> str:
    left = max(0.0, start + float(epoch) - 1 - last)
    share = f" ({projected / float(host):.0%} of the host's {fmt_bytes(host)})" if host else ""
    what, bound = SERIES[series].short, SERIES[series].bound
    return (
        f"projected at the end of the epoch ({epoch} steps, {left:.0f} to go): this process's RSS "
        f"{fmt_bytes(main)} plus the workers' {what} {fmt_bytes(projected - main)}, about "
        f"{fmt_bytes(projected)} of host memory{bound}{share}"
    )
