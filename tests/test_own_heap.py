"""memleak's own heap bytes on steps of counters alone: the second heap read is skipped there
(it costs ~25 us a step), so what the bookkeeping keeps must be exactly the live columns' growth."""
from __future__ import annotations

import gc

import pytest
import torch

import memleak
from memleak.probes.host import heap_counter
from memleak.recorder import tracker as tracker_module

pytestmark = pytest.mark.skipif(heap_counter() is None, reason="no glibc mallinfo2 here")


def test_a_counters_step_keeps_no_heap_but_the_live_columns_growth(tmp_path, monkeypatch):
    kept = []  # (live columns grew, heap bytes the step's bookkeeping kept) per step
    real_end = tracker_module.Tracker._end_step

    def end_step(self):
        heap, live = self._heap, self._live
        self._plain_step = lambda: False  # read the heap after every step, to see what skipping it misses
        reads = []

        def counting():
            reads.append(heap())
            return reads[-1]

        self._heap = counting
        try:
            real_end(self)
        finally:
            self._heap = heap
            del self._plain_step
        kept.append((live.grew or self.sink.keeps_steps, reads[1] - reads[0]))  # the step's value, then after its bookkeeping

    monkeypatch.setattr(tracker_module.Tracker, "_end_step", end_step)
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
    grew = [b for g, b in kept if g]
    other = [b for g, b in kept if not g]
    assert grew and sum(grew) > 0  # the columns did grow, and a read there sees it
    assert sum(abs(b) for b in other[50:]) <= 1024, [(i, b) for i, (g, b) in enumerate(kept) if b and not g]


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
