"""DataLoader workers: their PSS and private memory are recorded per worker, copy-on-read growth
of a Dataset of Python objects is reported naming the DataLoader, also beside a large main
process, the same data as a numpy array is clean; the leak verdict (projection past the host's
memory, growth past an epoch) and the projection's arithmetic on synthetic runs."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import memleak
from memleak.detect import workers as workers_detector
from memleak.run import Run
from memleak.schema import Kind

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker PSS is read from /proc")

# Each worker reads 10 batches: about 2.7 MiB of rows copied into each, above the detector's
# 1 MiB floor for private memory
ROWS, WIDTH, BATCH, STEPS = 5_376, 32, 256, 20
#: An unrelated array the main process holds (touched) when the workers fork: their PSS then
#: carries a share of it, and the copy is under 2 % of that level
BALLAST = 640 << 20


class PythonRows(Dataset):
    """Rows as tuples of Python floats: reading one touches 33 reference counts."""

    def __init__(self):
        self.rows = [tuple(float(i * WIDTH + j) for j in range(WIDTH)) for i in range(ROWS)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return torch.tensor([x for x in self.rows[i]])


class ArrayRows(Dataset):
    """The same rows as one numpy array: reading one touches the array's reference count only."""

    def __init__(self):
        self.rows = np.arange(ROWS * WIDTH, dtype=np.float64).reshape(ROWS, WIDTH)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return torch.from_numpy(self.rows[i])


def _record(make):
    dataset = make()
    train_loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
    # The workers fork from a test process that holds a thousand tests' objects: a garbage collection
    # in a worker walks them all and copies every page it touches, a growth that is no dataset's (CI
    # reported it for the numpy rows). Frozen objects are not walked (gc.freeze, as before a fork).
    gc.collect()
    gc.freeze()
    try:
        # workers_budget=1: read every step (the default 2 % reads every second or so)
        with memleak.track(level="counters", workers_budget=1.0) as tracker:
            for k, _batch in enumerate(train_loader):
                tracker.step()
                if k + 1 == STEPS:
                    break
    finally:
        gc.unfreeze()
    return tracker.report(), weakref.ref(dataset)


@pytest.fixture(scope="module")
def recorded():
    # both beside a large main process, the case PSS misses; what private memory shows does not
    # depend on the main process's size, so one run of each serves every test
    ballast = np.ones(BALLAST, dtype=np.uint8)  # np.ones writes every page: resident, shared at fork
    out = {"python": _record(PythonRows), "numpy": _record(ArrayRows)}
    del ballast
    return out


@pytest.fixture(scope="module")
def reports(recorded):
    return {k: v[0] for k, v in recorded.items()}


def _worker_findings(report):
    return [f for f in report.findings if f.detector == "workers"]


def test_each_workers_pss_is_its_own_series(reports):
    run = reports["python"].run
    (event,) = [e for e in run.events if e.get("event") == "dataloader_workers"]
    assert event["loader"] == "train_loader" and event["num_workers"] == 2
    assert event["dataset"] == "PythonRows" and event["steps_per_epoch"] == -(-ROWS // BATCH)
    assert event["columns"] == ["worker0_pss_bytes", "worker1_pss_bytes"]
    assert event["private_columns"] == ["worker0_private_bytes", "worker1_private_bytes"]
    for pss, private in zip(event["columns"], event["private_columns"]):
        values = run.steps[[pss, private]].dropna()
        assert len(values) >= STEPS // 2 and values[private].min() > 1 << 20
        # PSS is the private pages plus a share of the shared ones
        assert (values[private] <= values[pss]).all() and (values[private] < values[pss]).any()
    assert (run.steps["workers"] == 2).all()
    total = run.steps[["worker_private_bytes", *event["private_columns"]]].dropna()
    assert (total["worker_private_bytes"] == total[event["private_columns"]].sum(axis=1)).all()


def test_python_objects_are_copy_on_read_growth_naming_the_loader(reports):
    report = reports["python"]
    (f,) = _worker_findings(report)
    assert f.kind == Kind.HOST_GROWTH and f.location == "train_loader (DataLoader workers)"
    assert f.bytes_per_step > 0
    text = str(report)
    assert "copy-on-read" in text and "DataLoader `train_loader`" in text
    assert "projected at the end of the epoch" in text and "numpy arrays" in f.fix
    # well within the host's memory and within the first epoch: a finding, not a leak
    assert f.note and not f.leak and all(s.detectors != ("workers",) for s in report.suspects)
    assert f.data["projected_bytes"] < f.data["host_memory_bytes"]


def _pss_verdicts(run):
    rows = np.arange(len(run.steps))
    return [workers_detector._growth(run, c, rows) for c in ("worker0_pss_bytes", "worker1_pss_bytes")]


def test_copy_on_read_is_found_beside_a_large_main_process(reports):
    report = reports["python"]
    (f,) = _worker_findings(report)
    assert f.location == "train_loader (DataLoader workers)" and f.data["series"] == "private"
    assert "private memory" in f.evidence[0] and f.bytes_per_step > 0
    # the case the private series is for: judged on PSS, whose level now carries a share of the
    # main process's array, the same copy stays under the growth test's share of the level
    assert not any(g.leak for g in _pss_verdicts(report.run))


def check_numpy_rows_are_clean() -> None:
    """The numpy rows recorded beside the ballast: no worker finding, private memory read."""
    ballast = np.ones(BALLAST, dtype=np.uint8)
    report, _ = _record(ArrayRows)
    del ballast
    assert not _worker_findings(report), str(report)
    assert report.run.steps[["worker0_private_bytes", "worker1_private_bytes"]].notna().all(axis=1).sum() >= STEPS // 2


def test_the_same_data_as_a_numpy_array_is_clean():
    # judged in a process of its own: forked from a test worker that ran a thousand tests, the
    # workers once copied pages no dataset touched (a CI run in four)
    code = "from tests.test_workers import check_numpy_rows_are_clean as c; c()"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_memleak_keeps_no_dataset_alive(recorded):
    gc.collect()
    assert all(ref() is None for _, ref in recorded.values())


# ---------------------------------------------------------------- the verdict, on synthetic runs


def _run(slope: float, n: int, epoch: int, host: float, persistent: bool = False, private: bool = True) -> Run:
    """A run as the probe records it: per worker a PSS of 700 MB (its share of the main process's
    2 GB plus its own pages) and 20 MB of private memory, both growing by `slope` per step; without
    `private`, a run recorded before private memory was."""
    steps = np.arange(n, dtype=float)
    rng = np.random.default_rng(0)
    columns = {"step": steps, "time": steps * 0.1, "rss_bytes": np.full(n, 2e9)}
    for w in range(2):
        columns[f"worker{w}_pss_bytes"] = 7e8 + slope * steps + rng.normal(0, 2e4, n)
        if private:
            columns[f"worker{w}_private_bytes"] = 2e7 + slope * steps + rng.normal(0, 2e4, n)
    event = {
        "event": "dataloader_workers",
        "step": 0,
        "loader": "loader",
        "dataset": "Rows",
        "dataset_len": epoch * 64,
        "num_workers": 2,
        "steps_per_epoch": epoch,
        "persistent": persistent,
        "start_method": "fork",
        "pids": [11, 12],
        "columns": ["worker0_pss_bytes", "worker1_pss_bytes"],
    }
    if private:
        event["private_columns"] = ["worker0_private_bytes", "worker1_private_bytes"]
    return Run({"device": "cpu", "host_memory_bytes": host}, pd.DataFrame(columns), events=[event])


def test_projection_counts_the_main_process_once_and_each_workers_private_memory():
    n, epoch, slope = 200, 1_000, 1e6
    run = _run(slope, n, epoch, 1e12)
    (f,) = workers_detector.detect(run)
    left = epoch - n  # steps 0..199 seen of 0..999
    last = run.steps[["worker0_private_bytes", "worker1_private_bytes"]].iloc[-1]
    per_worker = f.data["per_worker_slope"]
    expected = 2e9 + sum(last[c] + per_worker[c] * left for c in last.index)
    assert f.data["series"] == "private" and f.data["projected_bytes"] == pytest.approx(expected)
    # about 2 GB + 2 x (20 MB + 1 GB): the main process's pages are not counted again in the workers
    assert f.data["projected_bytes"] == pytest.approx(2e9 + 2 * (2e7 + slope * (epoch - 1)), rel=1e-3)
    assert "RSS 1.9 GiB plus the workers' private memory" in f.evidence[1]


def test_a_run_without_private_memory_is_judged_on_pss_with_a_bound():
    (f,) = workers_detector.detect(_run(1e6, 200, 1_000, 1e12, private=False))
    # PSS counts each worker's share of the main process's pages, also in the main process's RSS
    assert f.data["series"] == "pss"
    assert f.data["projected_bytes"] == pytest.approx(2e9 + 2 * (7e8 + 1e6 * 999), rel=1e-3)
    assert "proportional set size" in f.evidence[0] and "at most" in f.evidence[1]


def test_projection_beyond_the_host_is_a_leak():
    # 1 MB per step per worker, 10,000 steps an epoch: 2 x 10 GB more than the 16 GB host
    (f,) = workers_detector.detect(_run(1e6, 200, 10_000, 16e9))
    assert f.leak and not f.note and "more than the host's memory" in " ".join(f.evidence)
    report = memleak.analyze(_run(1e6, 200, 10_000, 16e9))
    assert report.leak and report.suspects[0].location == "loader (DataLoader workers)"


def test_within_the_host_it_is_a_finding_not_a_leak():
    (f,) = workers_detector.detect(_run(1e6, 200, 1_000, 1e12))
    assert not f.leak and f.note
    assert memleak.analyze(_run(1e6, 200, 1_000, 1e12)).suspects == []


def test_growth_past_an_epoch_is_a_leak():
    (f,) = workers_detector.detect(_run(1e6, 300, 100, 1e12, persistent=True))
    assert f.leak and f.data["past_epoch"] and "after a whole epoch" in " ".join(f.evidence)


def test_private_memory_must_rise_a_mib_to_count():
    # 5 KB a step for 200 steps: 1 MB, 5 % of the workers' 20 MB, significant over the noise, but
    # less than a worker's own allocator settles by; four times that is a copy
    assert workers_detector.detect(_run(5e3, 200, 1_000, 1e12)) == []
    (f,) = workers_detector.detect(_run(2e4, 200, 1_000, 1e12))
    assert f.data["series"] == "private"


def _with_rss(run: Run, slope: float) -> Run:
    """`run` with each worker's RSS (1 GB, its shared pages counted whole) growing by `slope` a step."""
    n = len(run.steps)
    rng = np.random.default_rng(1)
    for w in range(2):
        run.steps[f"worker{w}_rss_bytes"] = 1e9 + slope * np.arange(n) + rng.normal(0, 2e4, n)
    run.events[0]["rss_columns"] = ["worker0_rss_bytes", "worker1_rss_bytes"]
    return run


def test_rss_growth_is_the_workers_own_memory_not_copy_on_read():
    # a Dataset that memoizes decoded samples: RSS and private memory grow together
    (f,) = workers_detector.detect(_with_rss(_run(1e6, 200, 10_000, 16e9), 1e6))
    assert f.data["series"] == "rss" and f.leak
    assert "allocate memory of their own" in f.evidence[0] and "copy-on-read:" not in f.evidence[0]
    assert "__getitem__" in f.fix and "numpy arrays" not in f.fix
    # copy-on-read copies pages that were resident already: RSS flat, private memory growing
    (g,) = workers_detector.detect(_with_rss(_run(1e6, 200, 10_000, 16e9), 0.0))
    assert g.data["series"] == "private" and "copy-on-read" in g.evidence[0] and "numpy arrays" in g.fix


DATASET_CACHE_SCRIPT = """
import numpy as np, torch, memleak
from torch.utils.data import DataLoader, Dataset

class DecodedCache(Dataset):  # decodes a sample on first use and memoizes it on self
    def __init__(self, n):
        self.n, self.cache = n, {}
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if i not in self.cache:
            self.cache[i] = torch.full((3, 64, 64), float(i))
        return self.cache[i]

ballast = np.ones(BALLAST, dtype=np.uint8)
loader = DataLoader(DecodedCache(10**6), batch_size=32, num_workers=2, multiprocessing_context="fork")
with memleak.track(level="counters") as tracker:
    for k, _batch in enumerate(loader):
        tracker.step()
        if k + 1 == 40:
            break
report = tracker.report()
(f,) = [f for f in report.findings if f.detector == "workers"]
print(f.data["series"], f.leak, f.location, "__getitem__" in f.fix, report.suspects[0].location, sep="|")
"""


def test_a_dataset_cache_filled_in_the_workers_is_found_on_the_default_budget():
    # 48 KiB a sample, 32 a batch: each worker's RSS grows 1.5 MiB a batch it makes. The smaps
    # reads of private memory cost milliseconds and the 2 % budget allows a few in a short run;
    # the RSS read every step finds it, also beside a 2.5 GiB main process (each worker's RSS
    # counts the pages it shares with it, and the cache is about 1 % of that level). A fresh
    # process, as a training script is: in one that freed much of its heap before forking (this
    # test suite's), the workers' allocations reuse pages resident already and RSS stays flat
    # (docs/outside-the-model.md)
    code = DATASET_CACHE_SCRIPT.replace("BALLAST", str(4 * BALLAST))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    series, leak, location, names_getitem, top = out.stdout.strip().splitlines()[-1].split("|")
    assert series == "rss" and leak == "True"  # 31,250 steps an epoch: far past the host's memory
    assert location == top == "loader (DataLoader workers)" and names_getitem == "True"


def test_growth_past_what_copy_on_read_can_copy_is_the_workers_own():
    # a Dataset of 2 Python objects can make copy-on-read copy 2 pages into a worker: 200 MB of
    # private memory each is memory the workers allocated (a cache), even where RSS did not show it
    run = _run(1e6, 200, 10_000, 16e9)
    run.events[0].update(dataset_objects=2, page_bytes=4096)
    (f,) = workers_detector.detect(run)
    assert f.data["series"] == "private" and "more than copy-on-read can copy" in f.evidence[0]
    assert "__getitem__" in f.fix and "numpy arrays" not in f.fix
    # a Dataset of 100,000 objects may copy 400 MB into each: copy-on-read, as before; so where
    # the probe counted past its cap (null) or a run recorded no count
    for objects in (100_000, None):
        run = _run(1e6, 200, 10_000, 16e9)
        run.events[0].update(dataset_objects=objects, page_bytes=4096)
        (g,) = workers_detector.detect(run)
        assert "copy-on-read:" in g.evidence[0] and "numpy arrays" in g.fix


def test_the_python_objects_a_dataset_holds_are_counted_through_containers_and_wrappers():
    from torch.utils.data import Subset

    from memleak.probes.loaders import python_objects

    rows = PythonRows()
    assert python_objects(rows) == ROWS * WIDTH + ROWS + 1  # the floats, the tuples, the list
    assert python_objects(ArrayRows()) == 1
    assert python_objects(Subset(rows, list(range(10)))) == python_objects(rows) + 1 + 1 + 10  # dataset, indices
    assert python_objects(rows, cap=1000) >= 1000  # stops at its cap


def test_a_dataset_whose_attribute_lookup_raises_is_counted_as_unknown():
    from memleak.probes.loaders import _objects

    class RemoteHandle:  # no __dict__: a lookup of it goes to __getattr__, which raises
        __slots__ = ("conn",)

        def __getattr__(self, name):
            raise RuntimeError("connection closed")

    class Remote(Dataset):
        def __init__(self):
            self.handle = RemoteHandle()

    assert _objects(Remote()) is None and _objects(ArrayRows()) == 1


def test_flat_workers_are_clean():
    assert workers_detector.detect(_run(0.0, 200, 1_000, 16e9)) == []
