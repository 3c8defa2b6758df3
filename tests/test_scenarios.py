"""The scenario corpus: every leak is found with its culprit on top; no benign loop is called a leak."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memleak
from tests import scenarios

ROOT = Path(__file__).resolve().parent.parent

NAMES = scenarios.names()


def _run(name: str):
    mod = scenarios.load(name)
    made = []

    def factory(model, **kw):
        t = memleak.track(model, level="full", **kw)
        made.append(t)
        return t

    mod.run(factory)
    assert made, f"{name} never started a tracker"
    return mod.EXPECTED, made[-1].report()


def test_corpus_size():
    leaks = [n for n in NAMES if scenarios.load(n).EXPECTED["verdict"] == "leak"]
    benign = [n for n in NAMES if scenarios.load(n).EXPECTED["verdict"] != "leak"]
    assert len(NAMES) >= 20 and len(leaks) >= 10 and len(benign) >= 6


@pytest.mark.parametrize("name", NAMES)
def test_scenario(name):
    if getattr(scenarios.load(name), "FRESH_PROCESS", False):
        # its reading depends on the heap a process brings (a worker that ran a thousand tests):
        # judged in a process of its own, as a user's run is
        code = f"from tests.test_scenarios import check_scenario; check_scenario({name!r})"
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    else:
        check_scenario(name)


def check_scenario(name):
    expected, report = _run(name)
    if expected["verdict"] == "leak":
        assert report.verdict.value == "leak", str(report)
        top = report.suspects[: expected.get("top", 3) or 3]
        where = [s.location for s in top]
        assert any(scenarios.names_location(expected["location"], loc) for loc in where), (
            f"{expected['location']} not in {where}\n{report}"
        )
        hit = next(s for s in top if scenarios.names_location(expected["location"], s.location))
        assert hit.kind.value == expected["kind"], str(report)
        assert hit.leak and hit.confidence >= 0.5
        assert hit.evidence and hit.fix
    else:
        assert report.verdict.value != "leak", str(report)


def test_a_file_and_line_names_a_holder_only_where_one_is_expected():
    assert not scenarios.names_location("atexit", "leak_atexit_save.py:42")
    assert scenarios.names_location("atexit", "atexit callbacks")
    assert scenarios.names_location("leak_pyplot_figures_never_closed.py:", "leak_pyplot_figures_never_closed.py:30")


def test_every_scenario_cites_a_source():
    for name in NAMES:
        doc = scenarios.load(name).__doc__ or ""
        assert "http" in doc, f"{name} names no real case"
