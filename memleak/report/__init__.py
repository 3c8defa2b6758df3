"""The Report: verdict, ranked suspects, text, plots and files."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..schema import Finding, Suspect, Verdict
from .text import render


@dataclass
class Report:
    run: Any
    verdict: Verdict
    suspects: list[Suspect]
    findings: list[Finding] = field(default_factory=list)
    growth: Any = None
    problems: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        top = f", top suspect {self.suspects[0].kind.value} at {self.suspects[0].location}" if self.suspects else ""
        return f"<memleak.Report verdict={self.verdict.value}{top}>"

    @property
    def leak(self) -> bool:
        return self.verdict == Verdict.LEAK

    def plot(self):
        """A matplotlib Figure of memory over steps with the trend and the OOM projection. Never shows it."""
        from .plots import plot_run
        return plot_run(self.run, self.growth, self.suspects)

    def to_dict(self) -> dict[str, Any]:
        """Everything in the report as JSON-able values (NaN becomes None)."""
        return _jsonable({
            "verdict": self.verdict.value,
            "run": getattr(self.run, "path", None),
            "meta": getattr(self.run, "meta", {}),
            "suspects": [s.to_dict() for s in self.suspects],
            "findings": [f.to_dict() for f in self.findings],
            "growth": asdict(self.growth) if is_dataclass(self.growth) else None,
            "problems": list(self.problems),
        })

    def save(self, folder: str | Path) -> list[Path]:
        """Write report.txt, findings.json and the PNG plots into `folder`; return the paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = [folder / "report.txt", folder / "findings.json"]
        written[0].write_text(str(self) + "\n", encoding="utf-8")
        written[1].write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        fig = self.plot()
        fig.savefig(folder / "memory.png", dpi=110, bbox_inches="tight")
        written.append(folder / "memory.png")
        if self.suspects:
            from .plots import plot_suspects
            plot_suspects(self.suspects).savefig(folder / "suspects.png", dpi=110, bbox_inches="tight")
            written.append(folder / "suspects.png")
        return written


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):  # numpy scalars
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Enum):
        return o.value
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    return str(o)
