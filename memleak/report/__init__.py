"""The Report: verdict, ranked suspects, text, plots and files.

One class serves every input `memleak.analyze` takes: a run, a distributed run (then
`ranks` holds each rank's own report and `divergences` the ranks unlike the others), and
a PyTorch memory snapshot (then `run` is the `Snapshot`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..schema import Divergence, Finding, Suspect, Verdict, to_jsonable
from .files import PNG_METADATA, check_free
from .live_note import live_warning_dict, live_warning_line
from .text import render

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure


@dataclass
class Report:
    """What memleak concluded about one run. `verdict` is "leak", "clean" or "inconclusive";
    `suspects` are ranked, most likely culprit first."""

    run: Any
    verdict: Verdict
    suspects: list[Suspect]
    findings: list[Finding] = field(default_factory=list)
    growth: Any = None
    problems: list[str] = field(default_factory=list)
    #: a distributed run: each rank's own report, by rank
    ranks: dict[int, Report] = field(default_factory=dict)
    #: a distributed run: the ranks that behave unlike the others
    divergences: list[Divergence] = field(default_factory=list)

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        top = f", top suspect {self.suspects[0].kind.value} at {self.suspects[0].location}" if self.suspects else ""
        parts = f", {len(self.ranks)} ranks" if self.ranks else ""
        return f"<memleak.Report verdict={self.verdict.value}{top}{parts}>"

    @property
    def leak(self) -> bool:
        """Whether the verdict is a leak."""
        return self.verdict == Verdict.LEAK

    @property
    def live_warning(self) -> str | None:
        """The report's line on the live check's warning during the run (when it first saw the leak,
        or why the growth it warned of was not one), or None where it never warned."""
        return live_warning_line(self)

    def plot(self) -> Figure:
        """A matplotlib Figure: memory over steps with the trend and the OOM projection (each
        rank's memory for a distributed run; the cache by pool for a snapshot). Never shows it."""
        from .plots import plot_ranks, plot_run, plot_snapshot

        if self.ranks:
            return plot_ranks(self)
        if not hasattr(self.run, "steps"):
            return plot_snapshot(self.run)
        return plot_run(self.run, self.growth, self.suspects)

    def to_html(self, include_plotlyjs: bool = True) -> str:
        """The report as one self-contained HTML page (plotly.js inlined: it opens offline)."""
        from .html import render_html

        return render_html(self, include_plotlyjs=include_plotlyjs)

    def _repr_html_(self) -> str:
        """The same content in a notebook cell (plotly.js inlined, so it works offline)."""
        from .html import render_html

        return render_html(self, full_html=False)

    def to_dict(self) -> dict[str, Any]:
        """Everything in the report as JSON-able values (NaN becomes None)."""
        d: dict[str, Any] = {
            "verdict": self.verdict.value,
            "run": getattr(self.run, "path", None),
            "meta": getattr(self.run, "meta", {}),
            "suspects": [s.to_dict() for s in self.suspects],
            "findings": [f.to_dict() for f in self.findings],
            "growth": asdict(self.growth) if is_dataclass(self.growth) and not isinstance(self.growth, type) else None,
            "problems": list(self.problems),
            "live_warning": live_warning_dict(self),
        }
        if self.ranks:
            d["world_size"] = getattr(self.run, "world_size", len(self.ranks))
            d["divergences"] = [x.to_dict() for x in self.divergences]
            d["ranks"] = {str(r): rep.to_dict() for r, rep in self.ranks.items()}
        return to_jsonable(d)

    def save(self, folder: str | Path) -> list[Path]:
        """Write report.txt, report.html, findings.json and the PNG plots into `folder` (and each
        rank's report.txt under rank{r}/ for a distributed run); return the paths. An earlier
        report there is replaced; a file of those names that memleak did not write is a UsageError,
        raised before anything is written."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{folder}: exists and is not a folder; report.save writes its files into a folder")
        written = [folder / "report.txt", folder / "report.html", folder / "findings.json", folder / "memory.png"]
        ranks = [folder / f"rank{rank}" / "report.txt" for rank in self.ranks]
        check_free(written + ranks + [folder / "suspects.png", folder / "holders.png"])
        folder.mkdir(parents=True, exist_ok=True)
        text, html, findings, memory = written
        text.write_text(str(self) + "\n", encoding="utf-8")
        try:
            html.write_text(self.to_html(), encoding="utf-8")
        except ImportError as e:  # an install without plotly: the other files still tell it all
            logging.getLogger("memleak").warning("%s not written: %s", html, e)
            written.remove(html)
        findings.write_text(json.dumps({"generator": "memleak", **self.to_dict()}, indent=2) + "\n", encoding="utf-8")
        self.plot().savefig(memory, dpi=110, metadata=PNG_METADATA)
        written += self._save_more_plots(folder)
        for rep, path in zip(self.ranks.values(), ranks, strict=True):
            path.parent.mkdir(exist_ok=True)
            path.write_text(str(rep) + "\n", encoding="utf-8")
            written.append(path)
        return written

    def _save_more_plots(self, folder: Path) -> list[Path]:
        """suspects.png when there are suspects, holders.png when the run walked holders."""
        from .plots import plot_holders, plot_suspects

        figs = {"suspects.png": plot_suspects(self.suspects, self.findings) if self.suspects else None}
        if not self.ranks and hasattr(self.run, "holders"):
            figs["holders.png"] = plot_holders(self.run, self.suspects)
        written = []
        for name, fig in figs.items():
            if fig is not None:
                fig.savefig(folder / name, dpi=110, metadata=PNG_METADATA)
                written.append(folder / name)
        return written
