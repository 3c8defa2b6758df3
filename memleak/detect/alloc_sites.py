"""Growth no holder explains, named by the line of the user's code that allocates it: the
``alloc_sites`` events (tracemalloc over a few steps once the live check took host memory for a
leak: probes/alloc_sites.py).

A library that keeps what the user's line makes each step in state of its own (pyplot's open
figures) leaves nothing for the reference walk to name: the host series grows, and no holder
grows with it. The traced blocks that line made over the window and that were still alive at its
end name it. A line counts when a host series leaks (the growth detector's own verdict), and
what the line gained a step is a good part of that growth (`HOST_SHARE`) and at least
`MIN_DATA_BPS`; where a holder the walk named is filled by that very line (`numpy.append` of a
list's predictions), the line is evidence for that holder; where the walk named a leaking holder at
all, the other lines are no suspects (what a retained graph makes on the way, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..records import HoldersRecord
from ..run import Run
from ..schema import ALLOC_SITES_EVENT, Kind
from ..units import fmt_bytes
from .culprit_table import Entries, entry
from .object_holders import HOST_SHARE, host_growth
from .thresholds import MIN_DATA_BPS

#: Confidence of a line that explains growth where the walk named no holder.
ALONE = 0.8
#: The share of the host growth the lines inside one library must explain together: tracemalloc
#: sees a library's Python objects, not the native memory they own (a pyplot figure saved each step
#: left 0.6 MiB of traced blocks a step, 15 % of its RSS growth, the renderer's buffers the rest).
LIBRARY_SHARE = 0.1
#: ... and the confidence where they explain less than HOST_SHARE of it.
PARTLY = 0.7
#: What to do with what a library keeps, where the library is known for one way to release it.
RELEASE = {"matplotlib": "close each figure when done with it (`plt.close(fig)`, or `plt.close('all')`)"}
#: What torch keeps of a line's calls may be what the line creates, or torch's own state.
TORCH_KEEPS = (
    "torch keeps what this line's call makes each step. Where the line creates something torch registers "
    "(a traced or compiled function, a hook, a custom op, a process group), create it once, outside the "
    "loop; where it is an ordinary call of the step (the forward, backward or optimizer step), the state is "
    "torch's own: run the loop without memleak to see whether the heap grows there too, and look for a known "
    "issue of your torch version."
)

#: Files of torch's compiler stack: blocks made there, kept step after step, are compiled code for
#: each new input shape (a guard failure, then a recompile, each kept in the code's cache).
COMPILER_FILES = ("torch/_dynamo/", "torch/_inductor/", "torch/_functorch/", "torch/_subclasses/fake_tensor")
RECOMPILES = (
    "torch.compile keeps compiled code for every input shape it has seen, and this line's inputs have a new "
    "shape each step (a growing sequence length, a new batch size): each compiles anew and stays in the cache. "
    "Compile with `dynamic=True`, or mark the varying dimension (`torch._dynamo.mark_dynamic(x, 1)`), or pad "
    "inputs to a few fixed sizes; a raised `torch._dynamo.config.cache_size_limit` lets the cache grow further."
)


def site_findings(run: Run, holders: Sequence[HoldersRecord], findings: Entries) -> None:
    """An entry for each line whose traced allocations grow with host memory (none where host
    memory does not grow); evidence for the holder that line fills, where the walk named one."""
    events = [e for e in run.events if e.get("event") == ALLOC_SITES_EVENT and isinstance(e.get("sites"), list)]
    if not events:
        return
    # host memory must leak on its own terms (RSS at the larger share it needs alone): a line's gain
    # over a few steps is no verdict; the fastest of the series that do (RSS may outgrow a leaking
    # heap and still creep too little to count alone)
    host = host_growth(run, min_rel=None)
    if host is None:
        return
    last = events[-1]
    steps = max(1, int(last.get("step", 0)) - int(last.get("since", 0)))
    stored = _stored_lines(holders, findings)
    named = any(_names_growth(f) for f in findings.values())
    least = max(MIN_DATA_BPS, HOST_SHARE * host.slope)
    for site, lib, nbytes, blocks, code, together in _by_library(last["sites"]):
        per_step = float(nbytes) / steps
        group = sum(float(s[2]) for s in together) / steps
        if per_step < least and (not lib or group < max(MIN_DATA_BPS, LIBRARY_SHARE * host.slope)):
            continue
        line = _short(site)
        words = _evidence(line, lib, code, float(nbytes), int(blocks), last, per_step)
        if line in stored:
            findings[stored[line]]["evidence"].append(words)
            continue
        if named:  # a holder the walk named explains the growth: its allocations by the way are no suspect
            continue
        others = [s for s in together if s[0] != site]
        f = entry(findings, line, kind=Kind.PYTHON_OBJECTS)
        f.update(
            kind=Kind.PYTHON_OBJECTS,
            leak=True,
            confidence=ALONE if group >= least else PARTLY,
            bps=group,
            total=group * max(1, len(run.steps)),
            fix=_fix(line, lib, together),
            data={**f["data"], "alloc_site": True, "library": lib, "host_column": host.column},
        )
        f["evidence"] += [
            words,
            *[_evidence(_short(s[0]), lib, s[4], float(s[2]), int(s[3]), last, float(s[2]) / steps) for s in others],
            f"no holder the walk reaches keeps them{f': {lib} keeps them in state of its own' if lib else ''}; "
            f"host memory grows with them ({host.column} {fmt_bytes(host.slope, signed=True)}/step)",
        ]
        if group < least:
            f["evidence"].append(
                f"they explain {group / host.slope:.0%} of that growth: the rest is not Python's allocations "
                f"(native memory, such as what {lib}'s objects own outside Python)"
            )


def _by_library(sites: Sequence[list]) -> list[tuple]:
    """Each traced site with the sites its library keeps alongside: a library that keeps what
    several lines make (a pyplot figure, its plot, the renderer savefig leaves on it) is one
    suspect, named by its largest line, with the others' bytes and lines as its own. The sites
    inside no library stand alone."""
    out, seen = [], set()
    sites = sorted((s for s in sites if _well_formed(s)), key=lambda s: -float(s[2]))
    for s in sites:
        lib = s[1]
        if lib and lib in seen:
            continue
        seen.add(lib)
        together = [t for t in sites if t[1] == lib] if lib else [s]
        out.append((*s[:5], together))
    return out


def _well_formed(site: object) -> bool:
    """A site as the probe writes it: [file:line, library, bytes, blocks, code]."""
    return (
        isinstance(site, list)
        and len(site) == 5
        and all(isinstance(v, str) for v in (site[0], site[1], site[4]))
        and all(isinstance(v, (int, float)) for v in site[2:4])
    )


def _stored_lines(holders: Sequence[HoldersRecord], findings: Entries) -> dict[str, str]:
    """The line that fills each holder with a leak entry (`HolderRow.stored`) -> that holder."""
    out = {}
    for r in holders:
        for row in r.holders:
            if row.stored and _names_growth(findings.get(row.holder, {})):
                out[row.stored] = row.holder
    return out


def _names_growth(f: dict) -> bool:
    """Whether a leak entry names what grows. A holder of one tensor whose size rose (one_tensor.py)
    may hold a larger batch each step, not a leak: it names nothing yet, and the lines stay suspects
    beside it."""
    return bool(f.get("leak")) and not f["data"].get("bytes_only")


def _short(site: str) -> str:
    """``/path/to/train.py:42`` as the report names lines: ``train.py:42``."""
    filename, _, line = site.rpartition(":")
    return f"{Path(filename).name}:{line}"


def _evidence(line: str, lib: str, code: str, nbytes: float, blocks: int, event: dict, per_step: float) -> str:
    inside = f", inside {lib}," if lib else ""
    shown = f" (`{code}`)" if code else ""
    return (
        f"tracemalloc over steps {event.get('since')}-{event.get('step')}: the blocks made at {line}{shown}{inside} "
        f"gained {fmt_bytes(nbytes)} ({blocks} blocks, {fmt_bytes(per_step)} a step) that were still alive at its end"
    )


def _fix(line: str, lib: str, together: Sequence[list]) -> str:
    if lib == "torch" and any(part in str(s[0]) for s in together for part in COMPILER_FILES):
        return f"At {line}: {RECOMPILES}"
    if lib == "torch":
        return f"At {line}: {TORCH_KEEPS}"
    how = RELEASE.get(lib, "release it when done with it (close it, or clear or bound the cache that keeps it)")
    who = lib or "something the walk does not reach"
    return (
        f"At {line}: what this line makes each step is kept by {who} and never released: {how}, or make it "
        f"once, outside the loop."
    )
