"""The live warning is provisional, and the final report reconciles with it: a growth that
stopped (a cache that filled) is warned of mid-run, then reported as bounded, not a leak."""
import gc
import logging
import re

import pytest
import torch

import memleak


pytestmark = pytest.mark.usefixtures("heap_read_every_step")  # the live check needs the heap series whole


def _loop(tracker, grow_steps: int, steps: int) -> list:
    kept = []
    for i in range(steps):
        x = torch.randn(128, 128)
        y = (x @ x).relu()
        if i < grow_steps:
            kept.append(torch.randn(256, 256))  # 256 KiB a step, then never again
        del y
        tracker.step()
    return kept


def _live_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memleak" and r.levelno == logging.WARNING
            and "possible leak" in r.getMessage()]


def _bounded_run(caplog, tmp_path):
    gc.collect()  # garbage other tests left would be given back mid-run by the live check's collection
    caplog.set_level(logging.WARNING, logger="memleak")
    calls = []
    with memleak.track(level="counters", budget="2 GiB", out=tmp_path / "run", on_leak=calls.append) as tracker:
        kept = _loop(tracker, grow_steps=80, steps=300)
    del kept
    return tracker, calls


def test_the_live_warning_says_possible_leak_and_a_bounded_run_reports_it_as_not_a_leak(caplog, tmp_path):
    tracker, calls = _bounded_run(caplog, tmp_path)
    warnings = _live_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    message = warnings[0]
    assert "confirmed" not in message
    assert "the report at the end says whether the growth lasted" in message
    assert "per step over the" in message and "steps since step" in message
    step = int(re.search(r"possible leak at step (\d+):", message).group(1))
    assert len(calls) == 1 and tracker.leak_confirmed  # on_leak still called once, as documented

    report = tracker.report()
    assert report.verdict == memleak.Verdict.CLEAN, str(report)
    line = report.live_warning
    assert line is not None and line.startswith(f"the live check warned at step {step} (")
    assert line.endswith("not a leak")
    assert "stopped growing after step" in line
    text = str(report)
    assert " ".join(text.split()).count(line) == 1, text  # once, wrapped at the report's width
    verdict_at = text.index("verdict: CLEAN")
    assert text.index("the live check warned at step") > verdict_at
    assert re.sub(r"\s+", " ", line) in report.to_html(include_plotlyjs=False)
    d = report.to_dict()["live_warning"]
    assert d["step"] == step and d["text"] == line and d["column"]

    # the run file says the same after the fact
    again = memleak.analyze(memleak.load(tmp_path / "run"))
    assert again.verdict == memleak.Verdict.CLEAN
    assert again.live_warning is not None and again.live_warning.startswith(f"the live check warned at step {step} (")


def test_a_real_leak_still_leads_with_the_leak_and_names_when_the_live_check_saw_it(caplog):
    gc.collect()
    caplog.set_level(logging.WARNING, logger="memleak")
    with memleak.track(level="counters", budget="2 GiB") as tracker:
        kept = _loop(tracker, grow_steps=200, steps=200)
    del kept
    message = _live_warnings(caplog)[0]
    step = int(re.search(r"possible leak at step (\d+):", message).group(1))
    report = tracker.report()
    assert report.verdict == memleak.Verdict.LEAK
    text = str(report)
    verdict = next(i for i, t in enumerate(text.splitlines()) if t.startswith("verdict: "))
    assert text.splitlines()[verdict].startswith("verdict: LEAK")
    assert report.live_warning.startswith(f"the live check first warned of this growth at step {step} (")
    assert "not a leak" not in report.live_warning
    assert text.index("verdict: LEAK") < text.index("the live check first warned of this growth")
    html = report.to_html(include_plotlyjs=False)
    assert html.index('class="verdict leak"') < html.index('class="live-warning"')


def test_a_run_whose_live_check_never_warned_has_no_such_line(caplog):
    with memleak.track(level="counters", budget="2 GiB") as tracker:
        _loop(tracker, grow_steps=0, steps=60)
    report = tracker.report()
    assert report.live_warning is None and report.to_dict()["live_warning"] is None
    assert "live check" not in str(report)
