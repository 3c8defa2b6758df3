"""Bad inputs get one line naming the file (and the line, and the field) and what is wrong:
run files whose lines, header or step values are malformed, and snapshot pickles that are
out of range or built to take far more memory than their size. errors="skip" (the command
line's --skip-broken) reads around them and loses nothing else. One test per defect."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import memleak
from memleak.cli import main as cli_main
from memleak.errors import MemleakError, RunFileError
from memleak.snapshot import Snapshot

sys.path.insert(0, str(Path(__file__).parent))
import snapshot_factory as sf  # noqa: E402

EXAMPLE = Path(__file__).parent / "data" / "example_run" / "run.jsonl"
LINES = EXAMPLE.read_text().splitlines()
FIRST_ARRAY = next(i for i, line in enumerate(LINES) if line.startswith("["))  # 0-based
N_STEPS = sum(line.startswith("[") for line in LINES)


def write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end)
    return path


def one_line_error(path: Path, *parts: str, errors: str = "raise") -> str:
    with pytest.raises(RunFileError) as e:
        memleak.load(path, errors=errors)
    message = str(e.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    for part in parts:
        assert part in message, message
    return message


def header_with(**fields) -> str:
    header = json.loads(LINES[0])
    header.update(fields)
    return json.dumps(header)


# ---------------------------------------------------------------- item 7: lines and header


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("where", ["middle", "last, without its newline"])
def test_a_deeply_nested_line_is_named_not_a_recursion_error(tmp_path, where):
    lines = list(LINES)
    if where == "middle":
        lines.insert(10, DEEP)
        path = write(tmp_path / "run.jsonl", lines)
        one_line_error(path, "line 11", "nested too deeply")
        run = memleak.load(path, errors="skip")
        assert len(run.steps) == N_STEPS and "line 11" in run.problems[0]
    else:  # a last line cut short is dropped; this one is no record either
        path = write(tmp_path / "run.jsonl", [*lines, DEEP], end="")
        run = memleak.load(path)
        assert len(run.steps) == N_STEPS and run.truncated
    assert str(memleak.analyze(run))


def test_a_layout_whose_floats_is_not_a_list_is_named_and_skip_reads_its_steps(tmp_path):
    lines = list(LINES)
    layout = json.loads(lines[FIRST_ARRAY - 1])
    assert layout["type"] == "layout"
    lines[FIRST_ARRAY - 1] = json.dumps({**layout, "floats": 5})
    path = write(tmp_path / "run.jsonl", lines)
    one_line_error(path, f"line {FIRST_ARRAY}", "floats")
    run = memleak.load(path, errors="skip")
    assert len(run.steps) == N_STEPS and len(run.problems) == 1 and f"line {FIRST_ARRAY}" in run.problems[0]
    assert run.steps["rss_bytes"].equals(memleak.load(EXAMPLE).steps["rss_bytes"])


@pytest.mark.parametrize("field, value", [
    ("budget_bytes", 10**400), ("budget_bytes", "lots"), ("budget_bytes", [1]), ("budget_bytes", -5),
    ("host_memory_bytes", "64 GB"), ("device_total_bytes", 1e300), ("device", 3),
], ids=lambda v: v if isinstance(v, str) else str(v)[:12])
def test_a_header_field_of_the_wrong_type_or_range_is_refused_at_load(tmp_path, field, value):
    path = write(tmp_path / "run.jsonl", [header_with(**{field: value}), *LINES[1:]])
    one_line_error(path, "line 1", field)
    run = memleak.load(path, errors="skip")  # the field is dropped, the rest kept
    assert field not in run.meta and len(run.steps) == N_STEPS and field in run.problems[0]
    assert str(memleak.analyze(run))


def test_a_rank_that_is_not_a_number_is_named_in_a_folder_of_ranks(tmp_path):
    for rank in (0, 1):
        write(tmp_path / f"run-rank{rank}-of2.jsonl", [header_with(rank="zero" if rank else 0, world_size=2),
                                                       *LINES[1:]])
    one_line_error(tmp_path / "run-rank1-of2.jsonl", "line 1", "rank")
    with pytest.raises(RunFileError, match="run-rank1-of2.jsonl: line 1: .*rank"):
        memleak.load(tmp_path)


_HUGE_WORLD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import memleak
try:
    memleak.analyze(memleak.load(sys.argv[1]))
    print("LOADED")
except memleak.RunFileError as e:
    print("ERROR", e)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bounds the child's memory with RLIMIT_AS")
@pytest.mark.parametrize("how", ["header", "file name"])
def test_a_world_size_of_a_trillion_ranks_is_refused_not_listed(tmp_path, how):
    # unchecked, the merged run lists its missing ranks: set(range(10**12)) takes all memory
    world = 10**12
    for rank in (0, 1):
        name = f"run-rank{rank}-of{world if how == 'file name' else 2}.jsonl"
        header = header_with(rank=rank, world_size=world) if how == "header" else json.dumps(
            {k: v for k, v in json.loads(header_with()).items() if k not in ("rank", "world_size")})
        write(tmp_path / name, [header, *LINES[1:]])
    out = subprocess.run([sys.executable, "-c", _HUGE_WORLD, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("ERROR ") and "world" in out.stdout, (out.stdout, out.stderr[-500:])


def test_report_skip_broken_reads_around_a_broken_line(tmp_path, capsys):
    lines = list(LINES)
    lines.insert(10, "garbage")
    path = write(tmp_path / "run.jsonl", lines)
    assert cli_main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and "line 11" in err and "--skip-broken" in err
    assert cli_main(["report", "--skip-broken", str(path)]) == 0
    assert "line 11 is not a valid record" in capsys.readouterr().out


def test_a_file_broken_on_every_line_gives_a_short_list_of_problems(tmp_path):
    lines = list(LINES)
    for i in range(FIRST_ARRAY, len(lines)):
        if lines[i].startswith("["):
            lines[i] = lines[i][:-1] + ",5]"  # one value more than the mask announces
    run = memleak.load(write(tmp_path / "run.jsonl", lines), errors="skip")
    assert len(run.problems) == 21 and "more problems like these" in run.problems[-1]
    assert len(str(memleak.analyze(run)).splitlines()) < 80


# ---------------------------------------------------------------- item 8: numbers out of range


@pytest.mark.parametrize("value, shown", [
    ("Infinity", "inf"), ("1e999", "inf"), ("-Infinity", "-inf"), (str(2**63 + 7), str(2**63 + 7)),
    (str(-(2**63) - 7), str(-(2**63) - 7)),
])
def test_a_step_value_out_of_range_is_refused_or_read_as_missing_never_wrapped(tmp_path, value, shown):
    lines = list(LINES)
    fields = lines[FIRST_ARRAY][1:-1].split(",")
    fields[4] = value  # rss_bytes of the first step (its mask sets every column)
    lines[FIRST_ARRAY] = "[" + ",".join(fields) + "]"
    path = write(tmp_path / "run.jsonl", lines)
    one_line_error(path, f"line {FIRST_ARRAY + 1}", "rss_bytes", shown)
    run = memleak.load(path, errors="skip")
    rss = run.steps["rss_bytes"]
    good = memleak.load(EXAMPLE).steps["rss_bytes"]
    assert rss.isna().iloc[0] and (rss.iloc[1:] == good.iloc[1:]).all() and rss.min() > 0
    assert f"line {FIRST_ARRAY + 1}: rss_bytes" in run.problems[0]
    assert str(memleak.analyze(run))


def test_a_plain_step_value_out_of_range_is_refused(tmp_path):
    lines = [*LINES, json.dumps({"type": "step", "step": 999, "rss_bytes": 2**64})]
    path = write(tmp_path / "run.jsonl", lines)
    one_line_error(path, f"line {len(lines)}", "rss_bytes")
    run = memleak.load(path, errors="skip")
    assert run.steps["rss_bytes"].dtype.kind == "f" and run.steps["rss_bytes"].isna().iloc[-1]
    assert str(memleak.analyze(run))


@pytest.mark.parametrize("column, value", [("step", "lots"), ("time", [1]), ("rss_bytes", True)])
def test_a_plain_step_whose_known_column_is_not_a_number_is_refused(tmp_path, column, value):
    # found by the fuzz test: "step": "lots" loaded, then analyze() failed converting it to float
    lines = [*LINES, json.dumps({"type": "step", "step": 999, "time": 99.0, "note": "text is fine here",
                                 column: value})]
    path = write(tmp_path / "run.jsonl", lines)
    one_line_error(path, f"line {len(lines)}", f"{column} is", "not a number")
    run = memleak.load(path, errors="skip")
    assert run.steps[column].isna().iloc[-1] and run.steps["note"].iloc[-1] == "text is fine here"
    assert str(memleak.analyze(run))


# ---------------------------------------------------------------- item 9: snapshots


def test_a_small_pickle_that_repeats_one_block_a_million_times_is_refused_quickly(tmp_path):
    snap = sf.fragmented()
    seg = snap["segments"][0]
    seg["blocks"] = seg["blocks"][:1] * 3000
    snap["segments"] = [seg] * 300  # 900,000 blocks in a 7 KB file
    path = sf.write(tmp_path / "memo.pickle", snap)
    assert path.stat().st_size < 20_000
    start = time.perf_counter()
    with pytest.raises(RunFileError, match=r"memo.pickle: .*900,301 segments, blocks and trace entries"):
        memleak.load(path)
    assert time.perf_counter() - start < 2


def test_a_deep_stack_repeating_a_long_file_name_is_refused(tmp_path):
    frame = sf.frame("/home/u/" + "x" * 10_000 + ".py", 1, "f")
    snap = sf.snapshot([sf.segment(0x7F0000000000, [sf.block(sf.MiB, frames=[frame] * 30_000)])])
    path = sf.write(tmp_path / "stack.pickle", snap)  # 300 MB of text from a 70 KB file
    with pytest.raises(RunFileError, match=r"stack.pickle: .*stacks would take more than"):
        memleak.load(path)


def _with(place: str, value):
    snap = sf.fragmented()
    snap["device_traces"] = [[sf.trace_entry("alloc", 0x7F0000000000, sf.MiB, sf.stack()),
                              sf.trace_entry("oom", 1 << 30, 300 * sf.MiB)]]
    where, _, key = place.rpartition(".")
    holder = {"segment": snap["segments"][0], "block": snap["segments"][0]["blocks"][0],
              "trace": snap["device_traces"][0][0], "oom": snap["device_traces"][0][1],
              "settings": snap["allocator_settings"]}[where]
    holder[key] = value
    return snap


BAD_VALUES = [
    ("segment.total_size", 2**70), ("segment.address", 2**64), ("segment.allocated_size", -1),
    ("segment.device", "cuda"), ("block.size", 2**64), ("block.size", -5), ("block.size", 1.5),
    ("block.requested_size", -1), ("block.state", ["a"]), ("trace.size", 2**70), ("trace.addr", -1),
    ("oom.device_free", 2**64), ("settings.max_split_size", "x"), ("settings.garbage_collection_threshold", "x"),
]


@pytest.mark.parametrize("place, value", BAD_VALUES)
def test_a_snapshot_value_out_of_range_is_named_with_its_field(tmp_path, place, value):
    path = sf.write(tmp_path / "bad.pickle", _with(place, value))
    field = place.rpartition(".")[2]
    with pytest.raises(RunFileError) as e:
        str(memleak.analyze(memleak.load(path)))
    message = str(e.value)
    assert message.startswith(f"{path}: this pickle is not a PyTorch memory snapshot") and field in message, message


@pytest.mark.parametrize("place, value", BAD_VALUES[:5])
def test_a_snapshot_value_out_of_range_in_memory_raises_the_same_clear_error(place, value):
    with pytest.raises(MemleakError) as e:
        str(memleak.analyze(Snapshot.from_data(_with(place, value))))
    assert isinstance(e.value, (RunFileError, ValueError)) and place.rpartition(".")[2] in str(e.value)


def test_unreadable_snapshot_errors_still_name_the_file_for_every_layout(tmp_path):
    data = sf.pre21(sf.fragmented())
    data["segments"][0]["blocks"][0]["history"] = {"addr": 1}  # a dict where a list belongs
    path = sf.write(tmp_path / "old.pickle", data)
    with pytest.raises(RunFileError, match=r"old.pickle: this pickle is not a PyTorch memory snapshot"):
        memleak.load(path)
    with pytest.raises(RunFileError, match="wrong type"):
        Snapshot.from_data(pickle.loads(path.read_bytes()))


# The child's peak: VmHWM, its own (ru_maxrss keeps the parent's peak across exec, and a test
# worker that ran big tests before would be measured instead).
_MEMO_CHILD = textwrap.dedent("""
    import sys
    import memleak
    try:
        memleak.load(sys.argv[1])
        print("LOADED")
    except memleak.RunFileError as e:
        print("ERROR", e)
    with open("/proc/self/status") as fh:
        print(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's peak from /proc")
def test_refusing_a_memo_bomb_takes_little_memory(tmp_path):
    snap = sf.fragmented()
    seg = snap["segments"][0]
    seg["blocks"] = seg["blocks"][:1] * 20_000
    snap["segments"] = [seg] * 450  # 9 million blocks in an 18 KB file: 3 GB of tables, unchecked
    path = sf.write(tmp_path / "memo.pickle", snap)
    out = subprocess.run([sys.executable, "-c", _MEMO_CHILD, str(path)], capture_output=True, text=True,
                         timeout=300)
    first, *_, maxrss = out.stdout.strip().splitlines()
    assert first.startswith("ERROR") and int(maxrss) < 600 << 10, out.stdout  # KiB
