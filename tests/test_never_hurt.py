"""The profiler never hurts the run it watches: a full disk, a read-only folder or a second
writer stops or moves the recording, never the training, and no file is ever overwritten."""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import threading
from pathlib import Path

import pytest
import torch

import memleak
from memleak.errors import RunFileError, UsageError
from memleak.io import RunWriter

from helpers import make_model, train

STEPS = 300


def _losses(steps: int = STEPS, **track) -> tuple[list[float], memleak.Tracker | None]:
    """Train the same model for `steps` steps, tracked when `track` options are given."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if not track:
        return train(model, opt, steps), None
    with memleak.track(model, optimizer=opt, level="counters", **track) as tracker:
        return train(model, opt, steps), tracker


def _stopped(caplog) -> list[str]:
    """memleak's warnings that the recording stopped or never reached its file."""
    return [r.getMessage() for r in caplog.records
            if r.name == "memleak" and r.levelno == logging.WARNING and ("stopped" in r.getMessage()
                                                                        or "could not be written" in r.getMessage())]


@contextlib.contextmanager
def _mount(where: Path, options: str):
    """A tmpfs mounted at `where` (root only: skips where it cannot be mounted)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if done.returncode:
        pytest.skip(f"could not mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


# ---------------------------------------------------------------- 1. a full disk

class _FillingDisk:
    """Stands for the run file on a disk with `room` bytes left: a short write when it fills,
    then ENOSPC on every write, and on closing (where buffered data would be written)."""

    def __init__(self, fh, room: int):
        self.fh, self.room = fh, room

    def write(self, data):
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(len(data), self.room)
        self.room -= n
        self.fh.write(data[:n])
        return n

    def close(self):
        self.fh.close()
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):  # flush, tell, truncate, fileno: the real file's
        return getattr(self.fh, name)


def _check_partial_run(tracker, caplog, losses, expected):
    """The training was untouched, one warning named the file, and what was written loads."""
    assert losses == expected  # every step ran, with the same numbers
    warned = _stopped(caplog)
    assert len(warned) == 1 and str(tracker.path) in warned[0] and "No space left on device" in warned[0]
    partial = memleak.load(tracker.path)  # the file up to the failure: whole records only
    k = len(partial.steps)
    assert 0 < k < STEPS and partial.steps["step"].tolist() == list(range(k)) and not partial.truncated
    assert memleak.analyze(partial).verdict is not None
    report = tracker.report()  # the whole run: the rest was kept in memory
    assert len(tracker.run().steps) == STEPS
    assert [p for p in report.problems if f"stopped at step {k} " in p and "No space left on device" in p]


def test_a_disk_filling_up_stops_the_recording_not_the_training(tmp_path, caplog):
    expected, _ = _losses()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        tracker.sink._fh = _FillingDisk(tracker.sink._fh, room=3000)
        losses = train(model, opt, STEPS)  # the optimizer's post-step hook writes each step
    _check_partial_run(tracker, caplog, losses, expected)


def test_a_full_tmpfs_stops_the_recording_not_the_training(tmp_path, caplog):
    expected, _ = _losses()
    with _mount(tmp_path / "disk", "size=200k") as disk:
        (disk / "filler").write_bytes(b"\0" * (200 * 1024 - 8192))  # leave two pages for the run
        losses, tracker = _losses(out=disk / "run")
        _check_partial_run(tracker, caplog, losses, expected)


def test_a_full_disk_never_replaces_the_loops_own_exception(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(KeyError, match="the user's own error"):
        with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
            tracker.sink._fh = _FillingDisk(tracker.sink._fh, room=500)
            train(model, opt, 50)
            raise KeyError("the user's own error")
    assert len(memleak.load(tmp_path).steps) < 50


def test_what_memory_keeps_after_a_full_disk_is_bounded(tmp_path, monkeypatch):
    import memleak.io.writer as writer

    monkeypatch.setattr(writer, "MEMORY_RECORDS", 40)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        tracker.sink._fh = _FillingDisk(tracker.sink._fh, room=1000)
        train(model, opt, STEPS)
    k = len(memleak.load(tmp_path).steps)
    assert len(tracker.run().steps) == k + 40
    assert [p for p in tracker.report().problems if f"the last {STEPS - k - 40} records were not kept" in p]


def test_a_disk_full_from_the_start_leaves_no_empty_run_file(tmp_path, monkeypatch, caplog):
    import memleak.io.writer as writer

    real = writer.create_run_file

    def no_room(path, overwrite):
        used, fh = real(path, overwrite)
        return used, _FillingDisk(fh, room=0)

    monkeypatch.setattr(writer, "create_run_file", no_room)
    losses, tracker = _losses(out=tmp_path)
    assert losses == _losses()[0] and tracker.path is None and list(tmp_path.iterdir()) == []
    assert len(_stopped(caplog)) == 1 and len(tracker.run().steps) == STEPS
    assert [p for p in tracker.report().problems if "could not be written" in p and "in memory only" in p]


# ---------------------------------------------------------------- 2. never overwrite

def test_a_file_that_is_no_run_is_refused_before_training(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"loss": 0.5}\n')
    model = make_model()
    with pytest.raises(UsageError, match="metrics.jsonl exists and is not a memleak run file"):
        with memleak.track(model, out=metrics, level="counters"):
            pytest.fail("the block must not run")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        memleak.track(out=notes, level="counters").start()
    assert metrics.read_text() == '{"loss": 0.5}\n' and notes.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "notes.txt"]


def test_a_second_run_goes_beside_the_first_and_load_picks_the_newest(tmp_path, caplog):
    _losses(20, out=tmp_path)
    first = (tmp_path / "run.jsonl").read_bytes()
    _, second = _losses(30, out=tmp_path)
    assert second.path == tmp_path / "run-2.jsonl" and (tmp_path / "run.jsonl").read_bytes() == first
    assert [r for r in caplog.records if "this run is recorded in" in r.getMessage() and "run-2.jsonl" in r.getMessage()]
    run = memleak.load(tmp_path)
    assert len(run.steps) == 30 and any("holds 2 runs" in p and "newest, run-2.jsonl" in p for p in run.problems)
    assert len(memleak.load(tmp_path / "run.jsonl").steps) == 20
    _, explicit = _losses(10, out=tmp_path / "run.jsonl")  # a file path: numbered the same way
    assert explicit.path == tmp_path / "run-3.jsonl"


def test_overwrite_replaces_an_earlier_run_and_nothing_else(tmp_path):
    _losses(20, out=tmp_path)
    _, tracker = _losses(10, out=tmp_path, overwrite=True)
    assert tracker.path == tmp_path / "run.jsonl" and len(memleak.load(tmp_path).steps) == 10
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]
    (tmp_path / "other.jsonl").write_text("user data\n")
    with pytest.raises(UsageError, match="not a memleak run file"):
        _losses(5, out=tmp_path / "other.jsonl", overwrite=True)
    assert (tmp_path / "other.jsonl").read_text() == "user data\n"


def test_two_distributed_runs_in_one_folder_load_as_the_newest(tmp_path, monkeypatch):
    for world_steps in (12, 8):
        for rank in (0, 1):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", "2")
            _losses(world_steps, out=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run-rank0-of2-2.jsonl", "run-rank0-of2.jsonl", "run-rank1-of2-2.jsonl", "run-rank1-of2.jsonl"]
    run = memleak.load(tmp_path)
    assert sorted(run.ranks) == [0, 1] and all(len(r.steps) == 8 for r in run.ranks.values())
    assert any("holds 2 runs" in p for p in run.problems)
    per_rank = tmp_path / "per-rank"  # rank-2.jsonl beside no rank.jsonl is one run's rank file, not a second run
    for rank in range(3):
        w = RunWriter(per_rank / f"rank-{rank}.jsonl")
        w.header({"rank": rank, "world_size": 3})
        w.step({"step": 0, "time": 0.1})
        w.close()
    run = memleak.load(per_rank)
    assert sorted(run.ranks) == [0, 1, 2] and not [p for p in run.problems if "runs" in p]


def test_the_demo_replaces_its_own_run_but_no_other(tmp_path):
    from memleak.demo import run_demo

    _losses(5, out=tmp_path)  # someone's run in the folder the demo is pointed at
    theirs = (tmp_path / "run.jsonl").read_bytes()
    run_demo(tmp_path, steps=4, device="cpu", level="counters")
    run_demo(tmp_path, steps=4, device="cpu", level="counters")  # a second demo: replaces its own
    assert (tmp_path / "run.jsonl").read_bytes() == theirs
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["run-2.jsonl", "run.jsonl"]
    assert memleak.load(tmp_path / "run-2.jsonl").meta["model"] == "TinyClassifier"


# ---------------------------------------------------------------- 4. a read-only folder

@contextlib.contextmanager
def _read_only(tmp_path: Path, how: str, monkeypatch):
    """A folder the run file cannot be created in."""
    folder = tmp_path / "ro"
    if how == "patched-open":
        import memleak.io.runfiles as runfiles

        def refuse(path, *args, **kwargs):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

        folder.mkdir()
        monkeypatch.setattr(runfiles, "open", refuse, raising=False)
        yield folder
    elif os.geteuid() == 0:  # root ignores permission bits: a read-only mount instead
        with _mount(folder, "ro,size=64k") as where:
            yield where
    else:
        folder.mkdir()
        folder.chmod(0o500)
        try:
            yield folder
        finally:
            folder.chmod(0o700)


@pytest.mark.parametrize("how", ["read-only-folder", "patched-open"])
def test_a_read_only_folder_records_in_memory(tmp_path, how, monkeypatch, caplog):
    expected, _ = _losses()
    with _read_only(tmp_path, how, monkeypatch) as folder:
        losses, tracker = _losses(out=folder / "run")
        assert losses == expected and tracker.path is None
        assert not (folder / "run").exists() or not any((folder / "run").iterdir())
    warned = _stopped(caplog)
    assert len(warned) == 1 and str(folder / "run" / "run.jsonl") in warned[0]
    report = tracker.report()
    assert len(tracker.run().steps) == STEPS
    assert [p for p in report.problems if "could not be written" in p and "in memory only" in p]


# ---------------------------------------------------------------- 5. two writers

def test_two_trackers_on_one_out_write_two_files(tmp_path):
    a, b = memleak.track(out=tmp_path, level="counters"), memleak.track(out=tmp_path, level="counters")
    with a, b:
        for _ in range(10):
            a.step()
        for _ in range(5):
            b.step()
    assert {a.path.name, b.path.name} == {"run.jsonl", "run-2.jsonl"}
    assert len(memleak.load(a.path).steps) == 10 and len(memleak.load(b.path).steps) == 5


def test_writers_starting_at_once_never_share_a_file(tmp_path):
    paths: list[Path] = []
    start = threading.Barrier(8)

    def open_one():
        start.wait()
        w = RunWriter(tmp_path / "run.jsonl")
        paths.append(w.path)
        w.close()

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 8


def test_overwrite_never_takes_a_file_another_writer_holds(tmp_path):
    (tmp_path / "run.jsonl").write_text('{"type": "header", "schema": 1}\n')  # an earlier run
    a = RunWriter(tmp_path / "run.jsonl", overwrite=True)
    a.header({"device": "cpu"})
    b = RunWriter(tmp_path / "run.jsonl", overwrite=True)  # a is still writing: b goes beside it
    b.header({"device": "cpu"})
    assert (a.path.name, b.path.name) == ("run.jsonl", "run-2.jsonl")
    a.close()
    b.close()


def _mixed_file(path: Path, second: str) -> None:
    """A run file into which a second writer wrote: a second header, or a step going back."""
    w = RunWriter(path)
    w.header({"device": "cpu"})
    for i in range(6):
        w.step({"step": i, "time": 0.1 * i})
    if second == "header":
        w.header({"device": "cpu"})
    w.step({"step": 2, "time": 9.0})
    w.step({"step": 3, "time": 9.1})
    w.close()


@pytest.mark.parametrize("second, why", [("header", "a second header"), ("step", "step 2 after step 5")])
def test_a_file_two_writers_mixed_is_reported(tmp_path, second, why):
    path = tmp_path / "mixed.jsonl"
    _mixed_file(path, second)
    with pytest.raises(RunFileError, match=f"mixed.jsonl: line \\d+ holds {why}: two writers"):
        memleak.load(path)
    run = memleak.load(path, errors="skip")
    assert run.steps["step"].tolist() == list(range(6))
    assert [p for p in run.problems if p.startswith("mixed.jsonl: line") and why in p]


def test_a_snapshot_at_an_oom_never_replaces_a_file_already_there(tmp_path, monkeypatch):
    from memleak.probes import history

    monkeypatch.setattr(history, "start", lambda entries: True)  # as on a GPU, without one
    monkeypatch.setattr(history, "stop", lambda: None)
    monkeypatch.setattr(history, "dump", lambda path: Path(path).write_bytes(b"snapshot") and str(path))
    (tmp_path / "oom-snapshot.pickle").write_bytes(b"someone's")
    with pytest.raises(torch.OutOfMemoryError):
        with memleak.track(out=tmp_path, level="counters", record_history=True) as tracker:
            tracker.step()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert (tmp_path / "oom-snapshot.pickle").read_bytes() == b"someone's"
    assert (tmp_path / "oom-snapshot-2.pickle").read_bytes() == b"snapshot"
    assert {"event": "snapshot", "path": "oom-snapshot-2.pickle", "step": 1} in memleak.load(tmp_path).events
