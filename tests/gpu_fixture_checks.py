"""What the recorded GPU fixtures (tests/data/gpu/, written by benchmarks/gpu_acceptance.py on a
real device) must show when memleak reads them on any machine. The acceptance run calls these
on the fixtures it has just written; tests/test_gpu_fixtures.py calls them on the ones in the
repository. Each raises AssertionError saying what is wrong."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parent / "data" / "gpu"
#: Every fixture folder and the files it holds (besides meta.json).
FIXTURES = {
    "leak": ("run.jsonl", "memory_stats.json"),
    "clean": ("run.jsonl", "memory_stats.json"),
    "fragmenting": ("run.jsonl", "memory_stats.json"),
    "snapshot": ("before.pickle", "after.pickle"),
    "oom": ("run.jsonl",),
}
MAX_TOTAL_BYTES = 5 << 20
META_KEYS = ("device", "driver", "cuda", "torch")


def read_meta(folder: Path) -> dict:
    meta = json.loads((folder / "meta.json").read_text())
    missing = [k for k in META_KEYS if not meta.get(k)]
    assert not missing, f"{folder.name}/meta.json lacks {missing}"
    for name in FIXTURES[folder.name]:
        assert (folder / name).is_file(), f"{folder.name}/{name} is missing"
    return meta


def check_probe_columns(folder: Path) -> None:
    """The run's allocator columns are memory_stats() read at the same step boundaries."""
    import memleak
    from memleak.probes.allocator import STAT_COLUMNS

    steps = memleak.load(folder).steps
    raw = json.loads((folder / "memory_stats.json").read_text())
    assert len(raw) == len(steps), f"{folder.name}: {len(steps)} steps but {len(raw)} memory_stats rows"
    for key, col in STAT_COLUMNS.items():
        want = [r[key] for r in raw]
        assert steps[col].astype("int64").tolist() == want, f"{folder.name}: {col} is not memory_stats['{key}']"


def check_leak(folder: Path) -> None:
    import memleak

    meta = read_meta(folder)
    check_probe_columns(folder)
    report = memleak.analyze(memleak.load(folder))
    leak = meta["workload"]["leak_bytes_per_step"]
    assert report.verdict.value == "leak", f"leak fixture: verdict {report.verdict.value}"
    growth = report.growth
    assert growth is not None and growth.column == "allocated_bytes", "the growth is not in allocated bytes"
    assert abs(report.growth.slope - leak) <= 0.05 * leak, f"slope {report.growth.slope:.0f} B/step, leaked {leak}"
    assert report.suspects and report.suspects[0].leak, f"no leaking suspect on top: {report.suspects[:1]}"


def check_clean(folder: Path) -> None:
    import memleak

    read_meta(folder)
    check_probe_columns(folder)
    report = memleak.analyze(memleak.load(folder))
    assert report.verdict.value != "leak", f"clean fixture called a leak: {report!r}"
    assert not any(s.leak for s in report.suspects), [s.location for s in report.suspects if s.leak]


def check_fragmenting(folder: Path) -> None:
    import memleak

    read_meta(folder)
    check_probe_columns(folder)
    report = memleak.analyze(memleak.load(folder))
    frag = [f for f in report.findings if f.kind.value == "fragmentation"]
    assert frag, f"no fragmentation finding: {[f.kind.value for f in report.findings]}"
    assert not frag[0].leak and report.verdict.value != "leak", f"fragmentation called a leak: {report!r}"
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in frag[0].fix, frag[0].fix


def check_snapshot(folder: Path) -> None:
    import memleak

    meta = read_meta(folder)
    before, after = memleak.load(folder / "before.pickle"), memleak.load(folder / "after.pickle")
    assert len(after.trace) > 0 and len(before.trace) > 0, "the snapshots hold no allocation history"
    frag = after.fragmentation()
    work = meta["workload"]
    assert int(frag["reserved_bytes"].sum()) == work["reserved_at_dump"], "snapshot reserve != memory_reserved()"
    assert "reserved" in str(memleak.analyze(after))
    top = memleak.diff(before, after).iloc[0]
    assert str(top["location"]).endswith(":" + work["leak_function"]), f"diff's top row is {top['location']}"
    assert int(top["count"]) == work["leak_count"], f"diff counts {top['count']} kept tensors"


def check_oom(folder: Path) -> None:
    import memleak

    meta = read_meta(folder)
    run = memleak.load(folder)
    events = {e["event"]: e for e in run.events}
    assert "oom" in events, f"no oom event: {sorted(events)}"
    assert events["oom"].get("num_ooms", 0) >= 1, events["oom"]
    assert "snapshot" in events, f"no snapshot event: {sorted(events)}"
    if meta["workload"].get("snapshot_in_fixture"):
        snap = memleak.load(folder / events["snapshot"]["path"])
        assert len(snap.ooms()) >= 1, "the OOM snapshot's trace holds no OOM"


CHECKS = {
    "leak": check_leak,
    "clean": check_clean,
    "fragmenting": check_fragmenting,
    "snapshot": check_snapshot,
    "oom": check_oom,
}


def total_bytes(root: Path = ROOT) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
