"""DataLoader workers: their PSS is recorded per worker, copy-on-read growth of a Dataset of
Python objects is reported naming the DataLoader, the same data as a numpy array is clean; the
leak verdict (projection past the host's memory, growth past an epoch) on synthetic runs."""

from __future__ import annotations

import gc
import sys
import weakref

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

# Big enough that the copy shows in a large parent too: a worker's PSS counts its share of the
# parent's pages, and the detector asks for a rise of 2 % of that level (a pytest worker late in
# the suite is several hundred MiB; with half these rows the rise stayed under 2 % there)
ROWS, WIDTH, BATCH, STEPS = 24_000, 32, 512, 30


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
    # workers_budget=1: read every step (the default 2 % reads every second or so)
    with memleak.track(level="counters", workers_budget=1.0) as tracker:
        for k, _batch in enumerate(train_loader):
            tracker.step()
            if k + 1 == STEPS:
                break
    return tracker.report(), weakref.ref(dataset)


@pytest.fixture(scope="module")
def recorded():
    return {"python": _record(PythonRows), "numpy": _record(ArrayRows)}


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
    for col in event["columns"]:
        values = run.steps[col].dropna()
        assert len(values) >= STEPS // 2 and values.min() > 1 << 20
    assert (run.steps["workers"] == 2).all()


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


def test_the_same_data_as_a_numpy_array_is_clean(reports):
    report = reports["numpy"]
    assert not _worker_findings(report)
    assert report.run.steps["worker0_pss_bytes"].notna().sum() >= STEPS // 2


def test_memleak_keeps_no_dataset_alive(recorded):
    gc.collect()
    assert all(ref() is None for _, ref in recorded.values())


# ---------------------------------------------------------------- the verdict, on synthetic runs


def _run(pss_slope: float, n: int, epoch: int, host: float, persistent: bool = False) -> Run:
    steps = np.arange(n, dtype=float)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "step": steps,
            "time": steps * 0.1,
            "rss_bytes": np.full(n, 2e9),
            "worker0_pss_bytes": 1e8 + pss_slope * steps + rng.normal(0, 2e4, n),
            "worker1_pss_bytes": 1e8 + pss_slope * steps + rng.normal(0, 2e4, n),
        }
    )
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
    return Run({"device": "cpu", "host_memory_bytes": host}, frame, events=[event])


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


def test_flat_workers_are_clean():
    assert workers_detector.detect(_run(0.0, 200, 1_000, 16e9)) == []
