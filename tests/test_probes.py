"""Probes on real tensors: host counters and census on CPU; allocator and NVML on CUDA."""
import sys
from types import SimpleNamespace

import pytest
import torch

import memleak
from memleak.probes import Probe, ProbeContext, Unavailable, resolve_device
from memleak.probes.allocator import AllocatorProbe, read_allocator
from memleak.probes.census import take_census
from memleak.probes.host import RSS_DENSE_STEPS, RSS_EVERY, HostProbe, heap_counter
from memleak.probes.nvml import NvmlProbe

MIB = 1 << 20
CPU = ProbeContext(device=torch.device("cpu"), level="counters")


def test_host_probe_reads_rss_and_the_heap_counter_sees_a_cpu_tensor():
    probe = HostProbe()
    probe.start(CPU)
    assert probe.sample(0, 0.0)["rss_bytes"] > 10 * MIB
    probe.stop()
    heap = heap_counter()
    if heap is None:
        pytest.skip("this C library does not report heap usage (glibc mallinfo2)")
    before = heap()
    x = torch.ones(4 * MIB // 4)
    assert 4 * MIB <= heap() - before < 4.2 * MIB
    del x
    assert heap() - before < 0.2 * MIB


def test_rss_is_read_every_step_at_first_then_every_fourth_step(tmp_path):
    with memleak.track(level="counters", out=tmp_path / "run") as tracker:
        for _ in range(RSS_DENSE_STEPS + 2 * RSS_EVERY):
            tracker.step()
    rss = memleak.load(tmp_path / "run").steps.set_index("step")["rss_bytes"]
    read = rss.notna()
    assert read[:RSS_DENSE_STEPS - 1].all() and (rss[read] > 10 * MIB).all()
    later = read[RSS_DENSE_STEPS:]
    assert later.to_dict() == {s: s % RSS_EVERY == 0 for s in later.index}


def test_the_tracker_records_the_heap_each_step_as_the_step_left_it(tmp_path):
    if heap_counter() is None:
        pytest.skip("this C library does not report heap usage (glibc mallinfo2)")
    kept = []
    with memleak.track(level="counters", out=tmp_path / "run") as tracker:
        for _ in range(4):
            kept.append(torch.ones(MIB // 4))  # 1 MiB a step, kept
            tracker.step()
    heap = memleak.load(tmp_path / "run").steps["heap_bytes"].to_numpy()
    assert len(heap) == 4
    # the kept MiB, give or take what Python frees or keeps beside it (a freed object: tens of bytes)
    assert all(0.99 * MIB <= d < 1.2 * MIB for d in heap[1:] - heap[:-1]), heap


def test_census_counts_a_storage_once_whatever_its_views():
    base = take_census().get("cpu", (0, 0))
    x = torch.zeros(MIB // 4)
    views = [x[1:], x.view(2, -1), x[::2]]
    now = take_census()["cpu"]
    assert now[0] - base[0] == MIB
    assert now[1] - base[1] == 1
    del views, x


def test_census_probe_runs_on_its_time_budget(monkeypatch):
    from memleak.probes import census
    from memleak.probes.census import CensusProbe
    ticks = iter(range(10**6))
    # every census costs 5 ms on this clock: the schedule, not the machine's load, is tested
    monkeypatch.setattr(census, "time", SimpleNamespace(perf_counter=lambda: next(ticks) * 0.005))
    probe = CensusProbe()
    probe.start(ProbeContext(device=torch.device("cpu"), level="full", options={"census_budget": 0.05}))
    first = probe.sample(0, 0.001)
    assert first["tensor_bytes"] is not None  # always on the first step
    cost = first["census_seconds"]
    assert cost == 0.005
    # Steps a tenth of the census cost: at 5 % a census is paid for every 200 steps, once the
    # first one (free: always taken) has been paid back by the 200 steps after it.
    values = [probe.sample(i, cost / 10)["tensor_bytes"] for i in range(1, 1001)]
    taken = [i for i, v in enumerate(values, start=1) if v is not None]
    assert len(taken) in (3, 4) and 395 <= taken[0] <= 405, taken
    assert all(195 <= b - a <= 205 for a, b in zip(taken, taken[1:])), taken


def test_census_probe_is_off_between_the_auto_windows():
    from memleak.probes.census import CensusProbe
    probe = CensusProbe()
    probe.start(ProbeContext(device=torch.device("cpu"), level="auto", options={"census_budget": 1.0}))
    probe.set_detail(0, False)
    assert all(probe.sample(i, 10.0)["tensor_bytes"] is None for i in range(5))
    probe.set_detail(5, True)
    assert probe.sample(5, 10.0)["tensor_bytes"] is not None  # ten seconds of steps pay for a census


def test_census_at_auto_skips_the_young_steps_and_starts_with_the_first_window():
    """The young steps would get one census, no trend, for a census's time: the first one comes on
    the first window's first step, however little step time has been earned by then."""
    from memleak.probes.census import CensusProbe
    probe = CensusProbe()
    probe.start(ProbeContext(device=torch.device("cpu"), level="auto", options={"census_budget": 0.05}))
    assert all(probe.sample(i, 0.001)["tensor_bytes"] is None for i in range(32))
    probe.set_detail(32, False)
    assert probe.sample(32, 0.001)["tensor_bytes"] is None
    probe.set_detail(40, True)
    first = probe.sample(40, 0.001)
    assert first["tensor_bytes"] is not None and first["census_seconds"] > 0
    assert probe.sample(41, 0.001)["tensor_bytes"] is None  # then on the budget: 5 % of a millisecond pays for none


def test_cpu_probes_say_why_they_do_not_apply():
    with pytest.raises(Unavailable, match="CPU"):
        AllocatorProbe().start(CPU)
    with pytest.raises(Unavailable, match="NVIDIA"):
        NvmlProbe().start(CPU)
    assert read_allocator(torch.device("cpu")) == {}


def test_skipped_probes_are_recorded_once_as_events():
    with memleak.track(level="counters", device="cpu") as tracker:
        tracker.step()
        tracker.step()
    events = [e for e in tracker.run().events if e["event"] == "probe_skipped"]
    # pinned: a CPU-only build (or machine) has no CUDA host allocator to read
    assert sorted(e["probe"] for e in events) == ["allocator", "nvml", "pinned"]


def test_a_failing_probe_is_turned_off_without_breaking_the_loop(monkeypatch):
    class Broken(Probe):
        name = "broken"

        def sample(self, step, seconds):
            raise RuntimeError("probe bug")

    import memleak.recorder.tracker as recorder
    real = recorder.probes_for_level
    monkeypatch.setattr(recorder, "probes_for_level", lambda level: [*real(level), Broken()])
    with memleak.track(level="counters") as tracker:
        for _ in range(3):
            tracker.step()
    run = tracker.run()
    assert len(run.steps) == 3
    assert [e["probe"] for e in run.events if e["event"] == "probe_failed"] == ["broken"]


def test_device_follows_the_model_unless_given():
    model = torch.nn.Linear(2, 2)
    assert resolve_device(None, model) == torch.device("cpu")
    assert resolve_device("cpu", model) == torch.device("cpu")


@pytest.mark.cuda
def test_allocator_probe_sees_a_cuda_tensor():
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    probe = AllocatorProbe()
    facts = probe.start(ProbeContext(device=device, level="counters"))
    assert facts["device_total_bytes"] == torch.cuda.get_device_properties(device).total_memory
    before = probe.sample(0, 0.0)
    x = torch.empty(64 * MIB, dtype=torch.uint8, device=device)
    after = probe.sample(1, 0.0)
    assert after["allocated_bytes"] - before["allocated_bytes"] == 64 * MIB
    assert after["reserved_bytes"] >= after["allocated_bytes"]
    assert after["requested_bytes"] - before["requested_bytes"] == 64 * MIB
    assert "device_free_bytes" not in after  # the driver is asked at an OOM only: it can wait on the device
    at_oom = read_allocator(device, driver=True)
    assert 0 < at_oom["device_free_bytes"] < at_oom["device_total_bytes"]
    for key in ("active_bytes", "inactive_split_bytes", "allocated_peak_bytes", "num_alloc_retries", "num_ooms"):
        assert key in after
    del x


@pytest.mark.cuda
def test_nvml_probe_sees_this_process():
    pytest.importorskip("pynvml")
    device = torch.device("cuda", torch.cuda.current_device())
    x = torch.empty(256 * MIB, dtype=torch.uint8, device=device)
    probe = NvmlProbe()
    facts = probe.start(ProbeContext(device=device, level="counters"))
    assert facts["driver_version"]
    values = probe.sample(0, 0.0)
    probe.stop()
    assert values["nvml_device_used_bytes"] >= torch.cuda.memory_reserved(device)
    if "nvml_process_bytes" in values:  # containers may hide host pids from the driver
        assert values["nvml_process_bytes"] >= torch.cuda.memory_reserved(device)
    del x


@pytest.mark.cuda
def test_a_cuda_leak_is_found_from_allocator_counters(tmp_path):
    device = torch.device("cuda")
    model = torch.nn.Linear(1024, 1024).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep = []
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        for _ in range(30):
            loss = model(torch.randn(64, 1024, device=device)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            keep.append(torch.empty(MIB, dtype=torch.uint8, device=device))
    report = tracker.report()
    assert report.verdict == "leak"
    assert report.growth.column == "allocated_bytes"
    assert abs(report.growth.slope - MIB) < 0.05 * MIB
    assert report.growth.steps_to_full is not None


def test_a_folder_beside_memleak_whose_name_starts_alike_is_the_users():
    import os

    from memleak.probes.frames import is_user_file

    here = os.path.dirname(os.path.dirname(os.path.abspath(memleak.__file__)))
    assert not is_user_file(os.path.join(os.path.dirname(memleak.__file__), "tracker.py"))
    assert is_user_file(os.path.join(here, "memleak-examples", "train.py"))
