"""memleak's own heap bytes on steps of counters alone: the heap is read on a budget and the
second read is skipped there (it costs ~25 us a step), so what the bookkeeping keeps must be
exactly the live columns' growth, which they count themselves."""
from __future__ import annotations

import gc

import pytest
import torch

import memleak
from memleak.probes.host import heap_counter
from memleak.recorder import live as live_module
from memleak.recorder.live import LiveCheck
from memleak.recorder.heap_reads import HeapReads

pytestmark = pytest.mark.skipif(heap_counter() is None, reason="no glibc mallinfo2 here")


def test_a_counters_step_keeps_no_heap_but_the_live_columns_growth(tmp_path, monkeypatch):
    """Every step read on both sides of the bookkeeping (the budget and the skipped second read
    off): a step that says it keeps nothing keeps nothing, and the steps where the live columns
    grew were foreseen (the tracker reads those)."""
    kept = []  # (may keep, heap bytes the step's bookkeeping kept) per step
    foreseen = [None] * 700  # (said it would grow, grew) per append: made now, not in the steps measured
    appended = iter(range(700))

    def begin(self, step, step_seconds, forced):
        self.base = self.counter()
        return self.base

    def settle(self, may_keep, frees=True, shift=0):
        kept.append((may_keep, self.counter() - self.base))

    real_append = LiveCheck.append

    def append(self, step, values):
        said = self.grows_next(step)
        real_append(self, step, values)
        foreseen[next(appended)] = (said, self.grew)

    monkeypatch.setattr(HeapReads, "begin", begin)
    monkeypatch.setattr(HeapReads, "settle", settle)
    monkeypatch.setattr(LiveCheck, "append", append)
    monkeypatch.setattr(live_module, "LIVE_ROWS", 256)  # halved twice in the run
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gc.disable()  # a collection in between would free the user's garbage: no bookkeeping of memleak's
    try:
        with memleak.track(model, optimizer=opt, level="counters", out=tmp_path / "run") as tr:
            for _ in range(600):
                model(torch.randn(32, 64)).sum().backward()
                opt.step()
                opt.zero_grad()
    finally:
        gc.enable()
    assert tr.iterations == 600
    grew = [b for k, b in kept if k]
    other = [b for k, b in kept if not k]
    assert grew and sum(grew) > 0  # the columns did grow, and a read there sees it
    assert sum(abs(b) for b in other[50:]) <= 1024, [(i, b) for i, (k, b) in enumerate(kept) if b and not k]
    foreseen = foreseen[: next(appended)]
    assert sum(g for _, g in foreseen) >= 10 and all(said == grew for said, grew in foreseen), foreseen


def test_what_the_auto_levels_screen_first_allocates_is_memleaks_own(tmp_path):
    """Its first call (the young steps' quiet check) imports and sets up what it needs, once a
    process: a fresh interpreter, so that nothing ran it before."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import torch, memleak
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with memleak.track(model, optimizer=opt, out={str(tmp_path / "run")!r}) as tr:
            for _ in range(40):
                model(torch.randn(32, 64)).sum().backward()
                opt.step()
                opt.zero_grad()
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    steps = memleak.load(tmp_path / "run").steps
    net = (steps["heap_bytes"] - steps["memleak_bytes"].fillna(0)).to_numpy()
    rises = zip(steps["step"][2:], net[2:] - net[1:-1], strict=True)
    jumps = [(int(s), int(d)) for s, d in rises if abs(d) > 256 * 1024]
    assert not jumps, jumps  # the user's loop allocates nothing that lasts after its first step
