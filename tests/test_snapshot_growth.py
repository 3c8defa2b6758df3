"""Growth read from one snapshot's allocation history: a line whose allocations keep surviving
through the recorded stretch is a leak's site; what was made once, in one burst, or by the step
still running is not."""
from __future__ import annotations

import pytest
import snapshot_factory as sf
from helpers import memleak_in_process

import memleak
from memleak.detect.snapshot_growth import detect_snapshot_growth, surviving_allocations
from memleak.snapshot import Snapshot


def _report(data):
    return memleak.analyze(Snapshot.from_data(data))


def test_a_line_whose_allocations_survive_every_step_is_the_leak():
    report = _report(sf.training_history(keep=lambda step: True))
    assert report.leak
    top = report.suspects[0]
    assert top.kind.value == "surviving_tensors" and top.location == "train.py:57:train_step"
    assert top.total_bytes == 30 * sf.MiB
    assert "LEAK: surviving_tensors at train.py:57:train_step" in str(report)
    assert len(report.suspects) == 1  # weights, and the running step's activations, are not


def test_a_leak_every_third_step_is_found_too():
    report = _report(sf.training_history(keep=lambda step: step % 3 == 0))
    assert report.leak and report.suspects[0].location == "train.py:57:train_step"


@pytest.mark.parametrize(
    "keep",
    [
        None,  # a healthy loop
        lambda step: step == 15,  # one tensor kept once
        lambda step: step < 7,  # a cache that filled in the first quarter and stopped
        lambda step: step >= 26,  # the last few steps only (what a step in progress holds)
    ],
    ids=["clean", "once", "filled_early", "at_the_end"],
)
def test_no_growth_where_nothing_keeps_surviving(keep):
    report = _report(sf.training_history(keep=keep))
    assert not report.leak and not report.suspects, str(report)
    assert "INCONCLUSIVE: no line's allocations kept surviving" in str(report)


def test_a_burst_with_a_few_strays_is_no_growth():
    report = _report(sf.training_history(steps=40, keep=lambda step: step in (2, 20, 21, 22, 23, 24, 25, 26, 38)))
    assert not report.leak, str(report)


def test_without_history_a_snapshot_is_one_moment():
    data = sf.training_history(keep=lambda step: True)
    data["device_traces"] = [[]]
    report = _report(data)
    assert not report.leak
    assert "without allocation history" in str(report)


def test_the_torch_2_0_layout_is_read_by_order():
    report = _report(sf.pre21(sf.training_history(keep=lambda step: True)))
    assert report.leak and report.suspects[0].location == "train.py:57:train_step"


def test_survivors_must_still_be_live():
    data = sf.training_history(keep=lambda step: True)
    for seg in data["segments"]:  # the snapshot says the kept blocks were freed after all
        for b in seg["blocks"]:
            if b["frames"] and b["frames"][2]["line"] == 57:
                b["state"] = sf.I
    snap = Snapshot.from_data(data)
    assert surviving_allocations(snap)["frames"].astype(str).str.contains(":57:").sum() == 0
    assert not detect_snapshot_growth(snap)


def test_memleak_report_check_exits_1_on_a_leaking_snapshot(tmp_path):
    leaking = sf.write(tmp_path / "leak.pickle", sf.training_history(keep=lambda step: True))
    clean = sf.write(tmp_path / "clean.pickle", sf.training_history())
    got = memleak_in_process("report", "--check", leaking)
    assert got.returncode == 1 and "train.py:57:train_step" in got.stdout, got.stdout
    assert memleak_in_process("report", "--check", clean).returncode == 0
