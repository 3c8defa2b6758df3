"""Random corruptions of real inputs: a recorded run file (the example run, and one written by
RunWriter here) and snapshot pickles (tests/snapshot_factory.py). Whatever the damage, loading
either works, and then analyze() and the report's text work too, or raises one RunFileError
whose one-line message names the file; never another exception, and never much memory."""
from __future__ import annotations

import math
import os
import pickle
import re
import resource
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memleak
from memleak.errors import RunFileError
from memleak.io import RunWriter
from memleak.snapshot import Snapshot

sys.path.insert(0, str(Path(__file__).parent))
import snapshot_factory as sf  # noqa: E402

EXAMPLE = Path(__file__).parent / "data" / "example_run" / "run.jsonl"
MAX_PEAK_BYTES = 200 << 20  # resident memory one case may add

# what a number or a string in a run file is replaced by
VALUES = [
    b"1" + b"0" * 400, str(2**63 + 7).encode(), str(-(2**63) - 7).encode(), b"1e999", b"-1e999", b"Infinity",
    b"-Infinity", b"NaN", b"-5", b"0", b"0.5", b"1e300", b"4503599627370496", b'"lots"', b'""', b"true", b"null",
    b"[]", b"{}", b"[1,2,3]", b'{"a":1}',
]
# lines inserted whole: none of them a record
JUNK_LINES = [b"garbage", b"\xff\xfe\x00", b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000, b"[1,2",
              b'{"type":', b"1e999", b"[" * 900 + b"]" * 900]
# lines inserted whole that are records, of the wrong shape for their type
RECORD_LINES = [b'{"type":"event","event":"oom","step":"x","message":[1]}', b'{"type":"event"}',
                b'{"type":"holders","step":1,"holders":5}', b'{"type":"modules"}', b'{"type":"births","step":null}',
                b'{"type":"layout","columns":["step","step"]}', b'{"type":"layout","columns":5}',
                b'{"type":"step","step":"x","time":{}}', b'{"type":"header","schema":1}', b'[1]', b'[0]',
                b'[3,1e999,5]', b'{"type":[1]}']
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
STRING = re.compile(rb'"[^"\\]*"')
KINDS = ["flip", "truncate", "insert_bytes", "insert_line", "duplicate_line", "swap_lines", "delete_line",
         "number", "string"]

pos = st.floats(0, 1, exclude_max=True)
ops = st.lists(st.tuples(st.sampled_from(KINDS), pos, pos, st.integers(0, 255),
                         st.sampled_from(VALUES + JUNK_LINES + RECORD_LINES)), min_size=1, max_size=3)
# MEMLEAK_FUZZ_EXAMPLES=2000 hunts longer, with fresh random cases each run
_SCALE = int(os.environ.get("MEMLEAK_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int) -> settings:
    return settings(max_examples=_SCALE or examples, deadline=None, derandomize=not _SCALE,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _peak_rss() -> tuple[int, int]:
    """(peak, current) resident bytes of this process since the last _reset_peak()."""
    status = Path("/proc/self/status").read_text()
    return tuple(int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024 for k in ("VmHWM", "VmRSS"))


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class bounded_memory:
    """Fails the case when it adds more than MAX_PEAK_BYTES of resident memory (Linux)."""

    def __enter__(self):
        self.on = sys.platform.startswith("linux") and _reset_peak()
        self.start = _peak_rss()[1] if self.on else 0

    def __exit__(self, *exc):
        if self.on and exc[0] is None:
            grown = _peak_rss()[0] - self.start
            assert grown < MAX_PEAK_BYTES, f"the case took {grown >> 20} MiB"


def mutate(data: bytes, steps: list[tuple]) -> bytes:
    """`data` with each (kind, p, q, byte, value) applied: p and q pick places, scaled to it."""
    for kind, p, q, byte, value in steps:
        lines = data.split(b"\n")
        i, j = int(p * len(lines)), int(q * len(lines))
        at = int(p * len(data))
        if kind == "flip" and data:
            data = data[:at] + bytes([byte]) + data[at + 1:]
        elif kind == "truncate":
            data = data[:at]
        elif kind == "insert_bytes":
            data = data[:at] + value + data[at:]
        elif kind in ("insert_line", "duplicate_line", "swap_lines", "delete_line") and lines:
            if kind == "insert_line":
                lines.insert(i, value)
            elif kind == "duplicate_line":
                lines.insert(j, lines[i])
            elif kind == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                del lines[i]
            data = b"\n".join(lines)
        elif kind in ("number", "string"):
            found = list((NUMBER if kind == "number" else STRING).finditer(data))
            if found:
                m = found[int(p * len(found))]
                data = data[:m.start()] + value + data[m.end():]
    return data


def check_run_file(path: Path) -> None:
    """Either each way of loading works and the run is analysed and printed, or RunFileError
    names the file in one line."""
    analysed = None
    for errors in ("raise", "skip"):
        try:
            run = memleak.load(path, errors=errors)
        except RunFileError as e:
            message = str(e)
            assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 2000, message
            continue
        assert len(run.problems) <= 21
        if analysed is not None and run.steps.equals(analysed.steps) and run.meta == analysed.meta:
            continue  # what loaded is what was just analysed: the same again proves nothing more
        assert str(memleak.analyze(run))
        analysed = run


@pytest.fixture(scope="module")
def written_run(tmp_path_factory) -> bytes:
    """A run as RunWriter writes it: two layouts, a plain step (a string value), an event."""
    path = tmp_path_factory.mktemp("written") / "run.jsonl"
    w = RunWriter(path)
    w.header({"device": "cuda:0", "level": "counters", "budget_bytes": 8 << 30, "device_total_bytes": 16 << 30,
              "rank": 0, "world_size": 1, "host_memory_bytes": 64 << 30, "pytorch_cuda_alloc_conf": None})
    for i in range(40):
        values = {"step": i, "time": 0.1 * (i + 1), "duration": 0.1, "allocated_bytes": 1000 + 4096 * i,
                  "reserved_bytes": 1 << 30}
        if i >= 20:
            values["tensor_bytes"] = 512 * i
        if i == 30:
            values["note"] = "x"
        w.step(values)
    w.event("oom", step=39, message="CUDA out of memory")
    w.close()
    return path.read_bytes()


@fuzz(200)
@given(steps=ops, which=st.sampled_from(["example", "written"]))
def test_a_corrupt_run_file_loads_or_names_the_file(tmp_path, written_run, steps, which):
    original = EXAMPLE.read_bytes() if which == "example" else written_run
    path = tmp_path / "run.jsonl"
    path.write_bytes(mutate(original, steps))
    with bounded_memory():
        check_run_file(path)


@fuzz(25)
@given(where=pos, junk=st.sampled_from(JUNK_LINES))
def test_skipping_a_junk_line_loses_no_step(tmp_path, where, junk):
    lines = EXAMPLE.read_bytes().split(b"\n")
    lines.insert(1 + int(where * (len(lines) - 1)), junk)
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(RunFileError, match=re.escape(str(path))):
        memleak.load(path)
    run = memleak.load(path, errors="skip")
    expected = memleak.load(EXAMPLE).steps
    assert run.steps.equals(expected) and len(run.problems) == 1
    assert str(memleak.analyze(run))


# ---------------------------------------------------------------- snapshots


def _snapshots() -> dict[str, object]:
    current = sf.fragmented()
    current["device_traces"] = [[sf.trace_entry("alloc", 0x7F0000000000, 20 * sf.MiB, sf.stack()),
                                 sf.trace_entry("free_requested", 0x7F0000000000, 20 * sf.MiB),
                                 sf.trace_entry("oom", 1 << 30, 300 * sf.MiB, sf.stack(line=99))]]
    return {"current": current, "pre21": sf.pre21(current), "list": sf.segment_list(current)}


SNAPSHOTS = _snapshots()
SNAP_VALUES = [2**70, 2**63, -1, 1.5, "x", None, [], {}, True, 10**400, math.inf, math.nan, ("a", 1),
               [{"filename": "f.py" * 1000, "line": 1, "name": "g"}] * 100]


def _paths(obj, at=()):
    """Every place in the nested data: (container path, key)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield at, k
        yield from _paths(v, (*at, k))


def _edit(data, place: float, value, repeat: int):
    """A deep copy of `data` with one place set to `value`, or (repeat > 1) one list holding
    its items `repeat` times over: the same objects, shared, as a pickle's memo shares them."""
    data = pickle.loads(pickle.dumps(data))
    places = list(_paths(data))
    if repeat > 1:
        places = [(at, k) for at, k in places if isinstance(_get(data, at)[k], list)] or places
    at, key = places[int(place * len(places))]
    holder = _get(data, at)
    if repeat > 1 and isinstance(holder[key], list):
        holder[key] = holder[key] * repeat
    else:
        holder[key] = value
    return data


def _get(data, at):
    for k in at:
        data = data[k]
    return data


def check_snapshot_file(path: Path, original: Path) -> None:
    try:
        snap = memleak.load(path)
    except RunFileError as e:
        message = str(e)
        assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 2000, message
        return
    assert str(memleak.analyze(snap)) and repr(snap)
    assert memleak.diff(snap, original) is not None


@fuzz(150)
@given(which=st.sampled_from(sorted(SNAPSHOTS)), place=pos, value=st.sampled_from(SNAP_VALUES),
       repeat=st.sampled_from([1, 1, 1, 3, 100_000]), protocol=st.sampled_from([2, 4, 5]),
       bytes_ops=st.lists(st.tuples(st.sampled_from(["flip", "truncate", "insert_bytes"]), pos, pos,
                                    st.integers(0, 255), st.sampled_from(VALUES)), max_size=2))
def test_a_corrupt_snapshot_loads_or_names_the_file(tmp_path, which, place, value, repeat, protocol, bytes_ops):
    original = sf.write(tmp_path / "original.pickle", SNAPSHOTS[which])
    data = _edit(SNAPSHOTS[which], place, value, repeat)
    path = tmp_path / "snap.pickle"
    path.write_bytes(mutate(pickle.dumps(data, protocol=protocol), bytes_ops))
    with bounded_memory():
        check_snapshot_file(path, original)
        if repeat == 1:  # in memory, no file size bounds it: the values are checked all the same
            try:
                snap = Snapshot.from_data(data)
            except RunFileError as e:
                assert "\n" not in str(e) and isinstance(e, ValueError)
            else:
                assert str(memleak.analyze(snap))
