"""What the interpreter keeps for the whole process. Tensors kept by callbacks registered with
``atexit``: ``atexit.register(fn, *args)`` keeps the
function and its arguments (a bound method keeps its object) until the interpreter exits, in the
interpreter's own list, which no variable, attribute or container reaches. Registered in the loop
(each object made registers its shutdown, a step registers a save of a fresh copy), it keeps one
more each time.

Over the ``atexit_callbacks`` column (probes/runtime.py): where the callbacks rose through the run
and the survivor checks found tensors held by nothing memleak could name, the callbacks are named
as their holder. Real cases: cherrypy #1274 ("a small amount of memory is leaked by calling
atexit.register repeatedly"), EasyProcess #1, dd-trace-py #2409 ("a million tracers kept around
to be shutdown at exit time").

And the fixes for the registries the walk names (probes/process_roots.py): ``sys.modules`` and the
registries of the warnings Python has shown, whose generic fix (bound the container, clear it)
would send the user to edit the interpreter's own state.
"""

from __future__ import annotations

from ..run import Run
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_table import Entries, entry
from .growth import analyze_growth
from .object_holders import host_growth

COLUMN = "atexit_callbacks"
LOCATION = "atexit callbacks"
#: Callbacks registered during the run, at least, and the share of the run's steps they came in
#: over (one registered each step or every few steps, not a burst at set-up).
MIN_ADDED = 3
MIN_SPAN = 0.5
#: Confidence of the callbacks as the holder where only their count rose with memory.
ALONE = 0.7

FIX = (
    "atexit.register(fn, *args) keeps fn and its arguments until the process exits (a bound method keeps "
    "its object): registered in the loop, each keeps what it was given. Register once, outside the loop, "
    "with what to save read when it runs (a reference to the model, not a copy), or call "
    "atexit.unregister(fn) when the object is done; weakref.finalize(obj, fn) lets the object go."
)


MODULES_FIX = (
    "sys.modules keeps every module imported under a new name, with its globals, for the life of the "
    "process: a file loaded anew under a fresh name each time (importlib.util.module_from_spec with "
    "`sys.modules[name] = module`) strands one module each time. Load it under one fixed name "
    "(importlib.reload, or replace the entry), or `del sys.modules[name]` once the module is done."
)
WARNINGS_FIX = (
    "Python records each warning it has shown, by its message, category and line, for the life of the "
    "process (module.__warningregistry__; warnings.onceregistry): a message that differs each time (a "
    "step, a value, a shape in it) adds one entry each time. Keep the message fixed and log the values "
    "with `logging` instead, issue it once (a flag), or filter it: "
    "`warnings.filterwarnings('ignore', category=...)`."
)


def registry_fixes(findings: Entries) -> None:
    """The fix for a leak the walk found in sys.modules or in a warnings registry."""
    for loc, f in findings.items():
        if not f.get("leak"):
            continue
        if loc == "sys.modules":
            f["fix"] = MODULES_FIX
        elif loc.endswith(".__warningregistry__") or loc == "warnings.onceregistry":
            f["fix"] = WARNINGS_FIX


def name_held(run: Run, findings: Entries, hkinds: dict[str, str]) -> None:
    """Name the callbacks as the holder of the leaking tensors no name held, where they rose: those
    the survivor checks found (survivors.py's `per_step`), or a holder kept from outside Python's
    view (probes/outside_held.py: the bound method atexit keeps, found by its referrers)."""
    added, span = _registered(run)
    if added < MIN_ADDED or span < MIN_SPAN:
        return
    held = [
        loc
        for loc, f in findings.items()
        if f.get("leak")
        and f["kind"] in (Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR)
        and ("per_step" in f["data"] or hkinds.get(loc) == "outside")
    ]
    if not held:
        _held_alone(run, findings, added, span)
        return
    f = findings.pop(held[0])
    for loc in held[1:]:  # each line that made what the callbacks keep: one holder
        other = findings.pop(loc)
        f["bps"] += other["bps"]
        f["total"] += other["total"]
        f["data"].setdefault("sites", []).extend(other["data"].get("sites", []))
    f["evidence"].append(
        f"{added} callbacks were registered with atexit during the run, over {span:.0%} of its steps: "
        "atexit keeps each with its arguments until the process exits, where no variable reaches them"
    )
    f.update(kind=Kind.SURVIVING_TENSORS, fix=FIX)
    findings[LOCATION] = f


def _held_alone(run: Run, findings: Entries, added: int, span: float) -> None:
    """The callbacks as the holder where memory grows and nothing else was named: what a bound method
    keeps (a trainer with its model and optimizer, made anew each trial) was never tagged as made
    by the user's line, so no survivor check counted it, and no root reaches it."""
    if any(f.get("leak") for f in findings.values()):
        return
    device = analyze_growth(run)
    g = device if device.leak and device.slope > 0 else host_growth(run, min_rel=None)
    if g is None or not g.leak:
        return
    f = entry(findings, LOCATION, kind=Kind.SURVIVING_TENSORS)
    f.update(leak=True, confidence=ALONE, bps=g.slope, total=g.slope * max(1, len(run.steps)), fix=FIX)
    f["evidence"] += [
        f"{added} callbacks were registered with atexit during the run, over {span:.0%} of its steps, while "
        f"{g.column} grew by {fmt_bytes(g.slope, signed=True)}/step",
        "atexit keeps each with its arguments until the process exits (a bound method keeps its object, and all "
        "that object keeps), where no variable, attribute or container memleak reached holds what grows",
    ]


def _registered(run: Run) -> tuple[int, float]:
    """Callbacks registered during the run, and the share of its steps between the first and the last rise."""
    if COLUMN not in run.steps:
        return 0, 0.0
    counts = run.steps[["step", COLUMN]].dropna()
    if len(counts) < 2:
        return 0, 0.0
    values = counts[COLUMN].to_numpy(dtype=float)
    steps = counts["step"].to_numpy()
    rose = steps[1:][values[1:] > values[:-1]]
    if not len(rose):
        return 0, 0.0
    span = (rose[-1] - rose[0] + 1) / max(1, steps[-1] - steps[0])
    return int(values[-1] - values[0]), float(span)
