"""Real GPU data, read on any machine: the fixtures in tests/data/gpu/ were recorded on a CUDA
device by benchmarks/gpu_acceptance.py (each folder's meta.json names the device, driver, CUDA
and torch). Each must read as it did there: the leak is a leak in allocated bytes, the clean run
clean, the fragmenting run a fragmentation finding (not a leak), the snapshots load, summarise
and diff to the line that kept tensors, the OOM run holds its OOM. See docs/gpu.md."""
from __future__ import annotations

import pytest

from tests import gpu_fixture_checks as fc

pytestmark = pytest.mark.skipif(
    not fc.ROOT.is_dir(),
    reason="no recorded GPU fixtures in tests/data/gpu/ yet: a session with a CUDA device records them "
    "with benchmarks/gpu_acceptance.py (docs/gpu.md)")


@pytest.mark.parametrize("name", list(fc.CHECKS))
def test_fixture_reads_as_recorded(name):
    folder = fc.ROOT / name
    assert folder.is_dir(), f"tests/data/gpu/{name} is missing: every fixture comes from one acceptance run"
    fc.CHECKS[name](folder)


def test_fixtures_stay_small():
    assert fc.total_bytes() <= fc.MAX_TOTAL_BYTES
