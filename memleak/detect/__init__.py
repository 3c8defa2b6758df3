"""Detectors: pure functions `Run -> list[Finding]`, one module per phenomenon.

They never touch torch or files, so they are tested on recorded and synthetic runs.
"""

from __future__ import annotations

import importlib

from ..schema import Finding

#: Detector modules, each with `detect(run) -> list[Finding]`.
DETECTORS = (
    "growth",
    "fragmentation",
    "nvml_gap",
    "culprits",
    "graphs",
    "lifetimes",
    "workers",
    "pinned",
    "profilers",
    "autocast",
    "drops",
    "no_grad",
)


def run_detectors(run) -> tuple[list[Finding], list[str]]:
    """All findings, and a note for each detector that failed (a bug to report, not a reason to lose the rest)."""
    findings: list[Finding] = []
    problems: list[str] = []
    for name in DETECTORS:
        module = importlib.import_module(f"{__name__}.{name}")
        try:
            findings.extend(module.detect(run))
        except Exception as e:
            problems.append(f"the {name} detector failed: {e!r}")
    return findings, problems
