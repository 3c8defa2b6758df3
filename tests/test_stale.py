"""A holder that grew while sampled is a leak only if the counters keep rising after its last sample
(detect/stale.py): a buffer that filled between two sampling windows is not."""
from dataclasses import replace

import numpy as np
import pandas as pd

from memleak.detect.stale import confirm_after_sampling
from memleak.run import Run
from memleak.schema import Finding, Kind

MIB = 2**20


def _run(heap):
    return Run({"device": "cpu"}, pd.DataFrame({"step": np.arange(len(heap)), "heap_bytes": heap}))


def _holder(last_sample=30):
    return Finding("culprits", Kind.SURVIVING_TENSORS, "memory.items", MIB, 30 * MIB, 0.86, ("grew",), "fix",
                   data={"steps": list(range(1, last_sample + 1, 3))})


def test_growth_that_stops_after_the_last_sample_is_not_a_leak():
    heap = np.r_[100 * MIB + MIB * np.arange(32), np.full(40, 132 * MIB)]  # filled at step 32
    (f,) = confirm_after_sampling(_run(heap), [_holder()])
    assert not f.leak
    assert "sampled on steps 1-28 only" in f.evidence[-1] and "stopped growing" in f.evidence[-1]


def test_growth_the_counters_go_on_showing_stays_a_leak():
    heap = 100 * MIB + MIB * np.arange(72.0)
    (f,) = confirm_after_sampling(_run(heap), [_holder()])
    assert f.leak and f.evidence == ("grew",)


def test_samples_that_reach_the_end_of_the_run_need_no_confirmation():
    heap = np.r_[100 * MIB + MIB * np.arange(32), np.full(10, 132 * MIB)]  # only 13 steps unsampled
    (f,) = confirm_after_sampling(_run(heap), [_holder()])
    assert f.leak


def test_a_sawtooth_after_the_last_sample_confirms_it():
    epochs = np.tile(MIB * np.arange(10.0), 7)  # rises every step, given back every 10 steps
    heap = np.r_[100 * MIB + epochs[:32], 100 * MIB + epochs[32:]]
    (f,) = confirm_after_sampling(_run(heap), [_holder()])
    assert f.leak


def _detached_holder(nodes=0.0):
    f = _holder()
    return replace(f, data={**f.data, "nodes": [nodes] * len(f.data["steps"])})


def test_detached_tensors_filled_and_emptied_each_epoch_are_not_confirmed_by_the_sawtooth():
    # a metric's list states: reset every 25 steps, sampled in the first epoch only
    epochs = np.tile(MIB * np.arange(25.0), 5)
    heap = 100 * MIB + epochs
    (f,) = confirm_after_sampling(_run(heap), [_detached_holder()])
    assert not f.leak and "fell back to the same low" in f.evidence[-1]
    # the same cycle over graphs kept until the epoch's end stays a leak (its peak is the epoch's length)
    (g,) = confirm_after_sampling(_run(heap), [_detached_holder(nodes=40.0)])
    assert g.leak


def test_a_leak_under_an_epoch_sawtooth_raises_its_lows_and_is_confirmed():
    epochs = np.tile(MIB * np.arange(25.0), 5)
    heap = 100 * MIB + epochs + 0.5 * MIB * np.arange(125.0)
    (f,) = confirm_after_sampling(_run(heap), [_detached_holder()])
    assert f.leak


def _data_holder():
    """A dict of per-sample floats the heap backed on its sampled steps (its tables are malloc'd)."""
    return Finding("culprits", Kind.PYTHON_OBJECTS, "per_sample", 6 << 10, 0.0, 0.89, ("grew",), "fix",
                   data={"steps": list(range(1, 28, 2)), "host_column": "heap_bytes"})


def _host_run(heap, rss):
    steps = pd.DataFrame({"step": np.arange(len(heap)), "heap_bytes": heap, "rss_bytes": rss})
    return Run({"device": "cpu"}, steps)


def test_python_data_whose_later_growth_shows_in_rss_alone_is_confirmed():
    # its small objects live in pymalloc's arenas: after step 28 the heap rose 1.3 KiB a step, RSS 5 KiB
    n = 60
    heap = 112 * MIB + 1300 * np.arange(n)
    rss = 320 * MIB + 5 * 1024 * np.arange(n)
    (f,) = confirm_after_sampling(_host_run(heap, rss), [_data_holder()])
    assert f.leak and f.evidence == ("grew",)


def test_python_data_that_stopped_in_both_host_series_is_not_confirmed():
    n = 60
    grow = np.minimum(np.arange(n), 28)
    (f,) = confirm_after_sampling(_host_run(112 * MIB + 6144 * grow, 320 * MIB + 6144 * grow), [_data_holder()])
    assert not f.leak and "stopped growing" in f.evidence[-1]
