"""Pickles built to exhaust memory are refused with one line, before they take the machine's memory."""
import struct
import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from memleak.errors import RunFileError
from memleak.io.unpickle import load_snapshot
try:
    load_snapshot(sys.argv[1])
    print("LOADED")
except RunFileError as e:
    print("ERROR", e)
print("MAXRSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
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
