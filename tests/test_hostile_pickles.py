"""Pickles built to exhaust memory are refused with one line, before they take the machine's memory."""
import struct
import subprocess
import sys

import pytest

# VmHWM, the peak of this process's own memory: ru_maxrss would also count the parent's (a
# pytest worker of a gigabyte or more), kept across exec.
PROBE = """
import sys
from memleak.errors import RunFileError
from memleak.io.unpickle import load_snapshot
try:
    load_snapshot(sys.argv[1])
    print("LOADED")
except RunFileError as e:
    print("ERROR", e)
try:
    peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
except OSError:  # no /proc: the tests that read the peak are Linux's
    peak = 0
print("MAXRSS_KB", peak)
"""


def load_in_child(path):
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    return lines[0], int(lines[-1].split()[1]) * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the address-space cap is Linux's")
@pytest.mark.parametrize("opcode", [b"r" + struct.pack("<I", 2**28), b"p268435456\n"])
def test_a_nine_byte_pickle_with_a_huge_memo_index_is_refused_cheaply(tmp_path, opcode):
    path = tmp_path / "memo.pickle"
    path.write_bytes(b"\x80\x02N" + opcode + b".")
    first, maxrss = load_in_child(path)
    assert first.startswith(f"ERROR {path}: ") and "memory" in first, first
    assert maxrss < 1 << 30  # unbounded, it reaches 4 GiB
