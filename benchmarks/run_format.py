"""Run-file formats side by side: today's hand-made step encoding against plain JSON Lines.

    python benchmarks/run_format.py                  # 1,000,000 steps
    python benchmarks/run_format.py --steps 300000   # a quicker run

The same realistic step series (`benchmarks/long_run.py`: a CUDA training loop with a slow
leak at level "counters", 20 columns) is written, one step at a time and flushed each step,
in each format:

  memleak        today's encoding (memleak.storage.RunWriter: layout record, then
                 ``[mask, changed values...]`` arrays), read by memleak.storage.read_run_file
                 (one pandas.read_csv pass + numpy);
  delta/orjson   plain JSON Lines, one object per step holding only the keys whose value
                 changed, written with orjson; read with orjson, then columns built and
                 forward-filled with numpy;
  full/orjson    plain JSON Lines, every key every step, written and read with orjson;
  delta/msgspec, full/msgspec   the same two files written and read with msgspec (if installed);
  full/pyarrow   the full/orjson file read by pyarrow.json.read_json (multi-threaded).

Every format gets the same value policy as memleak (time to 7 significant digits, duration
to 4, NaN/inf as null), and every reader must give back a DataFrame equal to memleak's.

Printed per format: bytes/step; write us/step (the append + flush a training step pays;
each writer's calls are timed on their own, the series generation is not counted);
load seconds (best of --repeat, default 3: the machine is shared, so the minimum is the
least noisy figure); and the lines of code of the reader and the writer (non-blank,
non-comment, docstrings excluded). `memleak.analyze` is timed once on memleak's Run: it
gets the same DataFrame whatever the format, so load + that is the "loaded and analysed" time.
"""
from __future__ import annotations

import argparse
import gc
import inspect
import io
import math
import sys
import tempfile
import time
import tokenize
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson
import pandas as pd

from memleak.io import RunWriter, read_run_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import long_run  # noqa: E402  (the step series and its header)

try:
    import msgspec
except ImportError:  # optional
    msgspec = None
try:
    import pyarrow as pa
    import pyarrow.json as pa_json
except ImportError:  # optional
    pa = pa_json = None

MiB, GiB = long_run.MiB, long_run.GiB
HEADER = long_run.HEADER
synthetic_steps = long_run.synthetic_steps


# ---------------------------------------------------------------- shared value policy

_SIG_DIGITS = {"time": 7, "duration": 4}  # as memleak.storage rounds them


def _round_sig(x: Any, digits: int) -> Any:
    if type(x) is not float or x == 0.0 or x - x != 0.0:
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def _policy(values: dict[str, Any]) -> dict[str, Any]:
    """memleak's value policy, for the plain formats: rounded time/duration, NaN/inf as None."""
    out = dict(values)
    for k, digits in _SIG_DIGITS.items():
        if k in out:
            out[k] = _round_sig(out[k], digits)
    for k, v in out.items():
        if type(v) is float and v - v != 0.0:
            out[k] = None
    return out


# ---------------------------------------------------------------- writers

class MemleakWriter:
    """Today's format: memleak.storage.RunWriter (its code is counted, not this wrapper)."""

    def __init__(self, path: Path):
        self._w = RunWriter(path, overwrite=True)  # its own scratch file, written again on each repeat
        self._w.header(HEADER)
        self.close = self._w.close

    def step(self, values: dict[str, Any]) -> None:
        # flushed each step like the others: the encodings are compared (the tracker's writer
        # batches 16 steps or half a second into one write)
        self._w.step(values)
        self._w.flush()


_ABSENT = object()


class DeltaOrjsonWriter:
    """One JSON object per step, only the keys that changed (``step`` always)."""

    def __init__(self, path: Path):
        self._fh = open(path, "wb")
        self._last: dict[str, Any] = {}
        self._fh.write(orjson.dumps({"type": "header", **HEADER}, option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()

    def step(self, values: dict[str, Any]) -> None:
        values = _policy(values)
        last = self._last
        delta = {k: v for k, v in values.items() if k == "step" or last.get(k, _ABSENT) != v}
        last.update(values)
        self._fh.write(orjson.dumps(delta, option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class FullOrjsonWriter:
    """One JSON object per step, every key."""

    def __init__(self, path: Path):
        self._fh = open(path, "wb")
        self._fh.write(orjson.dumps({"type": "header", **HEADER}, option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()

    def step(self, values: dict[str, Any]) -> None:
        self._fh.write(orjson.dumps(_policy(values), option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class DeltaMsgspecWriter(DeltaOrjsonWriter):
    """As DeltaOrjsonWriter, encoded by msgspec."""

    def __init__(self, path: Path):
        self._enc = msgspec.json.Encoder()
        self._fh = open(path, "wb")
        self._last = {}
        self._fh.write(self._enc.encode({"type": "header", **HEADER}) + b"\n")
        self._fh.flush()

    def step(self, values: dict[str, Any]) -> None:
        values = _policy(values)
        last = self._last
        delta = {k: v for k, v in values.items() if k == "step" or last.get(k, _ABSENT) != v}
        last.update(values)
        self._fh.write(self._enc.encode(delta) + b"\n")
        self._fh.flush()


class FullMsgspecWriter(FullOrjsonWriter):
    """As FullOrjsonWriter, encoded by msgspec."""

    def __init__(self, path: Path):
        self._enc = msgspec.json.Encoder()
        self._fh = open(path, "wb")
        self._fh.write(self._enc.encode({"type": "header", **HEADER}) + b"\n")
        self._fh.flush()

    def step(self, values: dict[str, Any]) -> None:
        self._fh.write(self._enc.encode(_policy(values)) + b"\n")
        self._fh.flush()


# ---------------------------------------------------------------- readers

def read_memleak(path: Path) -> pd.DataFrame:
    return read_run_file(path).steps


def _split(path: Path) -> tuple[bytes, list[bytes]]:
    """The header line and the step lines; a last line cut short (a killed run) is dropped."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines[-1]:  # no final newline: keep the last line only if it is whole
        try:
            orjson.loads(lines[-1])
        except orjson.JSONDecodeError:
            lines.pop()
    else:
        lines.pop()
    return lines[0], lines[1:]


def _frame(records: list[dict]) -> pd.DataFrame:
    """Step records (dicts) into a DataFrame. A key absent from a record kept its previous
    value (so a delta file is forward-filled; a full file has every key anyway); null is a
    missing value (NaN). A column whose values are all integers (no NaN) comes back int64."""
    names = list(records[0]) if records else []
    names += [k for k in set().union(*records) if k not in set(names)]  # keys that appear later
    current = dict.fromkeys(names)  # None: no value yet

    def row(rec: dict) -> tuple:
        current.update(rec)
        return tuple(current.values())

    table = np.array(list(map(row, records)), dtype=np.float64).reshape(len(records), len(names))
    out = {}
    for j, name in enumerate(names):
        col = table[:, j]
        out[name] = col.astype(np.int64) if np.array_equal(col, np.trunc(col)) else col.copy()
    return pd.DataFrame(out, copy=False)


def _no_gc(read: Callable) -> Callable:
    """Millions of small dicts: the cyclic GC would walk them again and again while they are built."""
    def wrapped(path: Path) -> pd.DataFrame:
        gc.disable()
        try:
            return read(path)
        finally:
            gc.enable()
    wrapped.__wrapped__ = read
    return wrapped


@_no_gc
def read_delta_orjson(path: Path) -> pd.DataFrame:
    _, lines = _split(path)
    return _frame(list(map(orjson.loads, lines)))


@_no_gc
def read_full_orjson(path: Path) -> pd.DataFrame:
    _, lines = _split(path)
    return _frame(list(map(orjson.loads, lines)))


@_no_gc
def read_delta_msgspec(path: Path) -> pd.DataFrame:
    _, lines = _split(path)
    return _frame(msgspec.json.Decoder(dict).decode_lines(b"\n".join(lines)))


@_no_gc
def read_full_msgspec(path: Path) -> pd.DataFrame:
    _, lines = _split(path)
    return _frame(msgspec.json.Decoder(dict).decode_lines(b"\n".join(lines)))


def read_full_pyarrow(path: Path) -> pd.DataFrame:
    _, lines = _split(path)
    return pa_json.read_json(pa.py_buffer(b"\n".join(lines))).to_pandas()


# ---------------------------------------------------------------- measuring

def code_lines(*objs: Any) -> int:
    """Lines of code of these functions/classes: not blank, not a comment, not a docstring."""
    total = 0
    for obj in objs:
        if obj is None:
            continue
        src = inspect.getsource(obj)
        drop: set[int] = set()
        prev = tokenize.INDENT
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.STRING and prev in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT):
                drop.update(range(tok.start[0], tok.end[0] + 1))  # a docstring
            if tok.type not in (tokenize.NL, tokenize.COMMENT):
                prev = tok.type
        total += sum(1 for n, line in enumerate(src.splitlines(), 1)
                     if n not in drop and line.strip() and not line.strip().startswith("#"))
    return total


def formats() -> list[dict]:
    from memleak.io import codec, reader, step_lines
    helpers = (_split, _frame, _no_gc)
    out = [
        dict(name="memleak", writer=MemleakWriter, reader=read_memleak,
             reader_code=(reader.read_run_file, reader.read_fast, reader._whole_lines, reader._Objects,
                          reader._scan_objects, reader._step_table, reader._decode_arrays, reader._read_fields,
                          reader._read_masks, reader._fill_columns, codec.n_masks,
                          reader.split_lines, codec.Layout, reader.decode_lines, reader._check_header,
                          reader.run_from_records, reader._empty_steps),
             writer_code=(RunWriter.step, RunWriter.flush, step_lines.as_numbers, step_lines.StepLines.lines,
                          step_lines.StepLines._steady_line, step_lines.StepLines._grow_layout,
                          step_lines.StepLines._encode, step_lines.StepLines._plain_step, codec.as_number,
                          codec.round_sig, RunWriter._emit, RunWriter._put)),
        dict(name="delta/orjson", writer=DeltaOrjsonWriter, reader=read_delta_orjson,
             reader_code=(read_delta_orjson, *helpers), writer_code=(DeltaOrjsonWriter.step, _policy, _round_sig)),
        dict(name="full/orjson", writer=FullOrjsonWriter, reader=read_full_orjson,
             reader_code=(read_full_orjson, *helpers), writer_code=(FullOrjsonWriter.step, _policy, _round_sig)),
    ]
    if msgspec is not None:
        out += [
            dict(name="delta/msgspec", writer=DeltaMsgspecWriter, reader=read_delta_msgspec,
                 reader_code=(read_delta_msgspec, *helpers),
                 writer_code=(DeltaMsgspecWriter.step, _policy, _round_sig)),
            dict(name="full/msgspec", writer=FullMsgspecWriter, reader=read_full_msgspec,
                 reader_code=(read_full_msgspec, *helpers),
                 writer_code=(FullMsgspecWriter.step, _policy, _round_sig)),
        ]
    if pa_json is not None:
        out.append(dict(name="full/pyarrow", writer=None, same_file_as="full/orjson", reader=read_full_pyarrow,
                         reader_code=(read_full_pyarrow, _split), writer_code=(FullOrjsonWriter.step, _policy, _round_sig)))
    return out


def write_all(fmts: list[dict], folder: Path, steps: int) -> None:
    """One pass over the series; each writer's step() calls are timed on their own."""
    live = [f for f in fmts if f["writer"] is not None]
    for f in live:
        f["path"] = folder / (f["name"].replace("/", "-") + ".jsonl")
        f["writer_obj"] = f["writer"](f["path"])
        f["write_s"] = 0.0
    writers = [(f, f["writer_obj"].step) for f in live]
    clock = time.perf_counter
    spent = [0.0] * len(writers)
    for values in synthetic_steps(steps):
        for j, (_, step) in enumerate(writers):
            t = clock()
            step(values)
            spent[j] += clock() - t
    for (f, _), s in zip(writers, spent):
        f["write_s"] = s
        f["writer_obj"].close()
    byname = {f["name"]: f for f in fmts}
    for f in fmts:
        if f["writer"] is None:
            src = byname[f["same_file_as"]]
            f["path"], f["write_s"] = src["path"], src["write_s"]


def time_load(reader: Callable[[Path], pd.DataFrame], path: Path, repeat: int) -> tuple[float, pd.DataFrame]:
    best, df = math.inf, None
    for _ in range(repeat):
        df = None
        gc.collect()
        t = time.perf_counter()
        df = reader(path)
        best = min(best, time.perf_counter() - t)
    return best, df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="loads per format; the best is kept")
    args = ap.parse_args(argv)
    fmts = formats()
    if msgspec is None:
        print("msgspec is not installed: its rows are left out (pip install msgspec)")
    if pa_json is None:
        print("pyarrow is not installed: its row is left out")
    n = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_all(fmts, Path(tmp), n)
        print(f"wrote {n:,} steps in {len(fmts)} formats in {time.perf_counter() - t0:.0f} s", flush=True)
        ref = None
        analyze_s = None
        for f in fmts:
            f["bytes"] = f["path"].stat().st_size
            f["load_s"], df = time_load(f["reader"], f["path"], args.repeat)
            if ref is None:
                ref = df
                import memleak
                run = read_run_file(f["path"])
                t = time.perf_counter()
                memleak.analyze(run)
                analyze_s = time.perf_counter() - t
                del run
            else:
                pd.testing.assert_frame_equal(df, ref, check_dtype=False)
                f["dtypes_same"] = bool((df.dtypes == ref.dtypes).all())
            del df
            print(f"  {f['name']}: loaded in {f['load_s']:.2f} s", flush=True)
    print()
    print(f"{n:,} steps, {len(ref.columns)} columns; load = best of {args.repeat}; "
          f"memleak.analyze on the loaded run: {analyze_s:.2f} s (the same DataFrame for every format)")
    print(f"{'format':<15}{'bytes/step':>11}{'write us/step':>15}{'load s':>8}{'load+analyse s':>16}"
          f"{'reader LoC':>12}{'writer LoC':>12}")
    for f in fmts:
        note = "" if f.get("dtypes_same", True) else "  (dtypes differ, values equal)"
        print(f"{f['name']:<15}{f['bytes'] / n:>11.1f}{f['write_s'] / n * 1e6:>15.1f}{f['load_s']:>8.2f}"
              f"{f['load_s'] + analyze_s:>16.2f}{code_lines(*f['reader_code']):>12}"
              f"{code_lines(*f['writer_code']):>12}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
