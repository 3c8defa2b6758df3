"""Distributed runs: one run file per rank, merged into a `MultiRun`, reported together.

Under torch.distributed (torchrun, torch.multiprocessing), each rank's tracker
writes its own file, ``run-rank{r}-of{w}.jsonl``, with the rank and the world
size in its header. ``memleak.load(folder)`` merges them here. The report gives
each rank's verdict (`memleak.analyze` per rank) and flags a rank that diverges
from the others: one that leaks while the others do not, or one that holds much
more memory than the median of the ranks.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .errors import RunFileError, UsageError
from .report import Report, _jsonable
from .run import Run
from .schema import Finding, Suspect, Verdict
from .units import fmt_bytes

_RANK_NAME = re.compile(r"rank(\d+)-of(\d+)")
#: A rank holding more than this multiple of the median of the ranks is flagged...
HOLDS_MORE_RATIO = 1.25
#: ...when the difference is also at least this many bytes (small runs differ by noise).
HOLDS_MORE_MIN_BYTES = 64 * 2**20
#: Header fields that differ from rank to rank; the others are shared and go to MultiRun.meta.
_PER_RANK_META = ("rank", "pid", "device", "start_time", "local_rank")


def _rank_of(path: Path, meta: dict[str, Any]) -> tuple[int | None, int | None]:
    rank, world = meta.get("rank"), meta.get("world_size")
    m = _RANK_NAME.search(path.name)
    if rank is None and m:
        rank = int(m.group(1))
    if world is None and m:
        world = int(m.group(2))
    return (int(rank) if rank is not None else None, int(world) if world is not None else None)


def load_ranks(files: Iterable[str | Path], errors: str = "raise") -> "MultiRun":
    """Read one run file per rank and merge them. The rank comes from each header
    (or the ``rank{r}-of{w}`` in the file name); two files of the same rank are an error."""
    from .storage import read_run_file
    files = [Path(f) for f in files]
    if not files:
        raise UsageError("load_ranks needs at least one run file")
    folder = files[0].parent if all(f.parent == files[0].parent for f in files) else None
    ranks: dict[int, Run] = {}
    by_rank: dict[int, Path] = {}
    worlds: set[int] = set()
    for f in files:
        run = read_run_file(f, errors=errors)
        rank, world = _rank_of(f, run.meta)
        if rank is None:
            raise RunFileError(f, "the header names no rank; a folder with several run files must hold one file per rank")
        if rank in by_rank:
            raise RunFileError(folder or f, f"two run files for rank {rank}: {by_rank[rank].name} and {f.name}; "
                                            "the folder holds several runs: pass one run file, or one folder per run")
        if world is not None:
            worlds.add(world)
        ranks[rank] = run
        by_rank[rank] = f
    return MultiRun(dict(sorted(ranks.items())), path=str(folder) if folder else None,
                    world_size=max(worlds) if worlds else len(ranks), inconsistent_world=len(worlds) > 1)


class MultiRun:
    """The runs of every rank of one distributed job.

    - ``ranks``: ``{rank: Run}``, by rank.
    - ``steps``: every rank's steps in one DataFrame, with a ``rank`` column first.
    - ``meta``: the header fields all ranks share, plus ``world_size`` and ``ranks``.
    - ``events``: every rank's events, each with its ``rank``.
    """

    def __init__(self, ranks: dict[int, Run], path: str | None = None, world_size: int | None = None,
                 inconsistent_world: bool = False):
        if not ranks:
            raise UsageError("a MultiRun needs at least one rank")
        self.ranks = ranks
        self.path = path
        self.world_size = world_size or len(ranks)
        self._steps: pd.DataFrame | None = None
        metas = [r.meta for r in ranks.values()]
        shared = {k: v for k, v in metas[0].items()
                  if k not in _PER_RANK_META and all(m.get(k, object()) == v for m in metas[1:])}
        shared.update(world_size=self.world_size, ranks=list(ranks))
        devices = sorted({str(m.get("device")) for m in metas})
        shared["device"] = devices[0] if len(devices) == 1 else ", ".join(devices)
        self.meta = shared
        self.problems: list[str] = []
        for rank, run in ranks.items():
            self.problems += [f"rank {rank}: {p}" for p in run.problems]
        missing = sorted(set(range(self.world_size)) - set(ranks))
        if missing:
            self.problems.append(f"no run file for rank{'s' if len(missing) > 1 else ''} "
                                 f"{_ranks_text(missing)} of the world size {self.world_size}")
        if inconsistent_world:
            self.problems.append("the run files disagree on the world size: are they from the same job?")

    @property
    def steps(self) -> pd.DataFrame:
        """All ranks' steps, a ``rank`` column first (built on first use)."""
        if self._steps is None:
            parts = [run.steps.assign(rank=rank) for rank, run in self.ranks.items()]
            steps = pd.concat(parts, ignore_index=True, sort=False) if parts else pd.DataFrame()
            self._steps = steps[["rank", *[c for c in steps.columns if c != "rank"]]]
        return self._steps

    @property
    def events(self) -> list[dict]:
        return [{"rank": rank, **e} for rank, run in self.ranks.items() for e in run.events]

    @property
    def truncated(self) -> bool:
        return any(run.truncated for run in self.ranks.values())

    @property
    def device(self) -> str:
        return str(self.meta.get("device", "cpu"))

    @property
    def records(self) -> dict[str, list[dict]]:
        """Every rank's other records by type, each with its ``rank``."""
        out: dict[str, list[dict]] = {}
        for rank, run in self.ranks.items():
            for name, recs in run.records.items():
                out.setdefault(name, []).extend({"rank": rank, **r} for r in recs)
        return out

    def table(self, name: str) -> pd.DataFrame:
        """Records of one type from every rank as a DataFrame, with a ``rank`` column."""
        return pd.DataFrame(self.records.get(name, []))

    def memory_column(self) -> str | None:
        """The memory column every rank tracks best, when they agree."""
        cols = {run.memory_column() for run in self.ranks.values()}
        return cols.pop() if len(cols) == 1 else None

    def __getitem__(self, rank: int) -> Run:
        return self.ranks[rank]

    def __len__(self) -> int:
        return max((len(r) for r in self.ranks.values()), default=0)

    def __repr__(self) -> str:
        cut = ", truncated" if self.truncated else ""
        return (f"<memleak.MultiRun {self.path or '(in memory)'}: ranks {_ranks_text(list(self.ranks))} "
                f"of {self.world_size}, {len(self)} steps{cut}>")

    def analyze(self) -> "MultiReport":
        """Each rank's report, the verdict over all ranks and the ranks that diverge."""
        from .analysis import analyze
        reports = {rank: analyze(run) for rank, run in self.ranks.items()}
        return MultiReport.build(self, reports)


# ---------------------------------------------------------------- report

@dataclass(frozen=True)
class Divergence:
    """A rank that behaves unlike the others."""

    rank: int
    kind: str                # "leaks_alone" | "holds_more"
    bytes: float             # bytes per step (leaks_alone) or bytes above the median (holds_more)
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "bytes": self.bytes, "evidence": self.evidence}


def _ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    ranks = sorted(ranks)
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if j == i else (f"{ranks[i]}, {ranks[j]}" if j == i + 1 else f"{ranks[i]}-{ranks[j]}"))
        i = j + 1
    return ", ".join(parts)


def _where(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks_text(ranks)}"


def _level(run: Run) -> tuple[str | None, float | None, float | None]:
    """(column, memory at the end: median of the last tenth of the steps, peak) of one rank."""
    col = run.memory_column()
    if col is None:
        return None, None, None
    s = run.steps[col].dropna()
    if s.empty:
        return col, None, None
    tail = s.iloc[-max(1, len(s) // 10):]
    return col, float(tail.median()), float(s.max())


def _merge_suspects(reports: dict[int, Report]) -> list[Suspect]:
    """Suspects of every rank; the same (kind, location) on several ranks becomes one suspect."""
    from .suspects import score
    groups: dict[tuple, list[tuple[int, Suspect]]] = {}
    for rank, rep in reports.items():
        for s in rep.suspects:
            groups.setdefault((s.kind, s.location), []).append((rank, s))
    merged: list[Suspect] = []
    for (kind, location), items in groups.items():
        ranks = [r for r, _ in items]
        best = max((s for _, s in items), key=lambda s: (s.leak, s.confidence, s.total_bytes))
        evidence = list(best.evidence)
        if len(ranks) > 1:
            evidence.insert(0, f"found on {_where(ranks)}")
        merged.append(Suspect(
            kind=kind, location=f"{_where(ranks)}: {location}",
            bytes_per_step=max(s.bytes_per_step for _, s in items),
            total_bytes=max(s.total_bytes for _, s in items),
            confidence=max(s.confidence for _, s in items), evidence=tuple(evidence), fix=best.fix,
            leak=any(s.leak for _, s in items),
            detectors=tuple(dict.fromkeys(d for _, s in items for d in s.detectors))))
    return sorted(merged, key=score, reverse=True)


def _divergences(run: MultiRun, reports: dict[int, Report]) -> list[Divergence]:
    out: list[Divergence] = []
    leaking = [r for r, rep in reports.items() if rep.leak]
    others = [r for r in reports if r not in leaking]
    if leaking and others:
        for r in leaking:
            g = reports[r].growth
            slope = float(getattr(g, "slope", 0.0) or 0.0)
            top = reports[r].suspects[0] if reports[r].suspects else None
            what = f"{top.kind.value} at {top.location}" if top else "memory grows"
            out.append(Divergence(r, "leaks_alone", slope,
                                  f"rank {r} leaks ({what}, {fmt_bytes(slope, signed=True)} per step) while "
                                  f"{_where(others)} {'does' if len(others) == 1 else 'do'} not: look for what runs "
                                  f"on rank {r} only (logging, evaluation, checkpointing, metrics kept on "
                                  "one rank, uneven data)"))
    if len(reports) >= 3 or (len(reports) == 2 and not leaking):
        levels = {r: _level(run.ranks[r]) for r in reports}
        ends = {r: lv[1] for r, lv in levels.items() if lv[1] is not None}
        cols = {lv[0] for lv in levels.values() if lv[0] is not None}
        if len(ends) >= 2 and len(cols) == 1:
            values = np.array(list(ends.values()))
            median = float(np.median(values)) if len(ends) >= 3 else float(values.min())
            ref = "the median of the ranks" if len(ends) >= 3 else "the other rank"
            for r, v in ends.items():
                if median > 0 and v > HOLDS_MORE_RATIO * median and v - median >= HOLDS_MORE_MIN_BYTES:
                    out.append(Divergence(r, "holds_more", v - median,
                                          f"rank {r} holds {fmt_bytes(v)} of {next(iter(cols))} at the end, "
                                          f"{v / median:.2f}x {ref} ({fmt_bytes(median)}): an unbalanced "
                                          "workload, or something kept on that rank only"))
    return out


@dataclass
class MultiReport(Report):
    """The report over every rank: `reports[rank]` is each rank's own `Report`.

    `verdict` is "leak" if any rank leaks, "clean" when every rank is clean, else
    "inconclusive"; `suspects` are ranked across ranks, with the ranks in the
    location (``rank 1: history``); `divergences` name the ranks unlike the others.
    """

    reports: dict[int, Report] = field(default_factory=dict)
    divergences: list[Divergence] = field(default_factory=list)

    @classmethod
    def build(cls, run: MultiRun, reports: dict[int, Report]) -> "MultiReport":
        verdicts = [rep.verdict for rep in reports.values()]
        if Verdict.LEAK in verdicts:
            verdict = Verdict.LEAK
        elif verdicts and all(v == Verdict.CLEAN for v in verdicts):
            verdict = Verdict.CLEAN
        else:
            verdict = Verdict.INCONCLUSIVE
        findings: list[Finding] = []
        for rank, rep in reports.items():
            for f in rep.findings:
                findings.append(Finding(f.detector, f.kind, f"rank {rank}: {f.location}", f.bytes_per_step,
                                        f.total_bytes, f.confidence, f.evidence, f.fix, f.leak, f.data))
        # the growth shown with the verdict: the fastest-growing leaking rank, else the fastest-growing one
        ranked = sorted(reports.items(), key=lambda kv: (kv[1].leak, float(getattr(kv[1].growth, "slope", 0) or 0)),
                        reverse=True)
        growth = ranked[0][1].growth if ranked else None
        problems = list(run.problems)
        for rank, rep in reports.items():
            problems += [f"rank {rank}: {p}" for p in rep.problems if f"rank {rank}: {p}" not in problems]
        return cls(run=run, verdict=verdict, suspects=_merge_suspects(reports), findings=findings,
                   growth=growth, problems=problems, reports=reports, divergences=_divergences(run, reports))

    # ------------------------------------------------------------ text
    def headline(self) -> str:
        leaking = [r for r, rep in self.reports.items() if rep.leak]
        clean = [r for r, rep in self.reports.items() if rep.verdict == Verdict.CLEAN]
        if leaking:
            top = self.suspects[0] if self.suspects else None
            line = f"LEAK on {_where(leaking)}"
            if top is not None:
                where = top.location
                prefix = f"{_where(leaking)}: "
                if where.startswith(prefix):  # said once is enough
                    where = where[len(prefix):]
                line += f": {top.kind.value} at {where}"
                if top.bytes_per_step:
                    line += f", {fmt_bytes(top.bytes_per_step, signed=True)} per step"
            rest = [r for r in self.reports if r not in leaking]
            if rest:
                line += f"; {_where(rest)} {'does' if len(rest) == 1 else 'do'} not leak"
            return line
        if len(clean) == len(self.reports):
            return f"CLEAN: no sustained growth on any of the {len(self.reports)} ranks"
        undecided = [r for r in self.reports if r not in clean]
        return f"INCONCLUSIVE on {_where(undecided)}: too few steps or no clear trend to decide"

    def __str__(self) -> str:
        from .report.text import _wrap, suspect_lines
        run = self.run
        lines = [f"memleak report: {run.path or '(in-memory run)'} "
                 f"({len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''}, world size {run.world_size})"]
        meta = run.meta
        lines.append(f"  up to {len(run)} steps per rank on {meta.get('device', '?')}, level {meta.get('level', '?')}")
        if run.truncated:
            cut = [r for r, x in run.ranks.items() if x.truncated]
            lines.append(f"  note: the run file of {_where(cut)} was cut short (the process was killed); "
                         "every whole step before that was read")
        lines += ["", "verdict: " + self.headline(), "", "ranks:"]
        rows = [("rank", "verdict", "steps", "memory at end", "peak", "growth/step", "top suspect")]
        for rank, rep in self.reports.items():
            col, end, peak = _level(run.ranks[rank])
            g = rep.growth
            slope = getattr(g, "slope", None) if g is not None and getattr(g, "shape", "") not in ("no_data", "too_short") else None
            top = rep.suspects[0] if rep.suspects else None
            rows.append((str(rank), rep.verdict.value, str(len(run.ranks[rank])), fmt_bytes(end), fmt_bytes(peak),
                         fmt_bytes(slope, signed=True), f"{top.kind.value} at {top.location}" if top else "-"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        for r in rows:
            lines.append("  " + "  ".join(cell.ljust(w) if c in (1, 6) else cell.rjust(w)
                                          for c, (cell, w) in enumerate(zip(r, widths))).rstrip())
        if self.divergences:
            lines += ["", "ranks that diverge from the others:"]
            for d in self.divergences:
                lines += _wrap(d.evidence, "  - ")
        else:
            lines += ["", "no rank diverges from the others."]
        lines += suspect_lines(self.suspects, "suspects over all ranks, most likely first:")
        for e in run.events:
            if e.get("event") == "oom":
                lines += ["", f"out of memory on rank {e['rank']} at step {e.get('step')}: {e.get('message', '')}"]
        for p in self.problems:
            lines += _wrap("note: " + p, "")
        return "\n".join(lines)

    def __repr__(self) -> str:
        leaking = [r for r, rep in self.reports.items() if rep.leak]
        where = f" on {_where(leaking)}" if leaking else ""
        return f"<memleak.MultiReport verdict={self.verdict.value}{where}, {len(self.reports)} ranks>"

    # ------------------------------------------------------------ data, plots, files
    def to_dict(self) -> dict[str, Any]:
        d = {
            "verdict": self.verdict.value, "run": self.run.path, "meta": self.run.meta,
            "world_size": self.run.world_size,
            "suspects": [s.to_dict() for s in self.suspects],
            "divergences": [d.to_dict() for d in self.divergences],
            "ranks": {str(r): rep.to_dict() for r, rep in self.reports.items()},
            "problems": list(self.problems),
        }
        return _jsonable(d)

    def plot(self):
        """A matplotlib Figure: each rank's memory over steps (leaking ranks highlighted). Never shows it."""
        try:
            import matplotlib
            from matplotlib.figure import Figure
        except ImportError:  # pragma: no cover - matplotlib is a dependency
            from .errors import MemleakError
            raise MemleakError("plots need matplotlib: pip install matplotlib") from None
        del matplotlib
        fig = Figure(figsize=(9, 4.5))
        ax = fig.add_subplot(1, 1, 1)
        cols = {self.run.ranks[r].memory_column() for r in self.reports} - {None}
        col = next(iter(cols)) if len(cols) == 1 else None
        for rank, rep in self.reports.items():
            run = self.run.ranks[rank]
            c = col or run.memory_column()
            if c is None:
                continue
            s = run.steps[["step", c]].dropna() if "step" in run.steps else run.steps[[c]].dropna()
            if len(s) > 4000:  # a long run: every k-th point is plenty for a picture
                s = s.iloc[:: len(s) // 4000]
            x = s["step"] if "step" in s else np.arange(len(s))
            ax.plot(x, s[c] / 2**20, lw=2.0 if rep.leak else 1.0,
                    label=f"rank {rank}: {rep.verdict.value}" + ("" if col else f" ({c})"))
        ax.set_xlabel("step")
        ax.set_ylabel(f"{col or 'memory'} (MiB)")
        ax.set_title(f"memory per rank: {self.verdict.value}")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="best", fontsize="small")
        return fig

    def save(self, folder: str | Path) -> list[Path]:
        """Write report.txt, findings.json, memory.png (all ranks), and each rank's
        report.txt under rank{r}/, into `folder`; return the paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = [folder / "report.txt", folder / "findings.json", folder / "memory.png"]
        written[0].write_text(str(self) + "\n", encoding="utf-8")
        written[1].write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        self.plot().savefig(written[2], dpi=110, bbox_inches="tight")
        if self.suspects:
            try:
                from .report.plots import plot_suspects
            except ImportError:
                plot_suspects = None
            if plot_suspects is not None:
                plot_suspects(self.suspects).savefig(folder / "suspects.png", dpi=110, bbox_inches="tight")
                written.append(folder / "suspects.png")
        for rank, rep in self.reports.items():
            sub = folder / f"rank{rank}"
            sub.mkdir(exist_ok=True)
            (sub / "report.txt").write_text(str(rep) + "\n", encoding="utf-8")
            written.append(sub / "report.txt")
        return written
