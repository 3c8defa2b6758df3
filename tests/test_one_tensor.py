"""A holder of one tensor made anew each step, larger each time: grown by concatenation (one end
carried over: a leak), or a larger batch each step (new values at both ends: no leak)
(probes/fingerprint.py, detect/one_tensor.py)."""
from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.detect.one_tensor import new_values
from memleak.probes.fingerprint import ends


def test_the_fingerprint_keeps_the_end_a_concatenation_carries_over():
    kept = torch.randn(8, 8)
    grown = torch.cat([kept, torch.randn(4, 8)])
    prepended = torch.cat([torch.randn(4, 8), kept])
    fresh = torch.randn(12, 8)
    head, tail = ends(kept).split(":")
    assert ends(grown).split(":")[0] == head and ends(grown).split(":")[1] != tail
    assert ends(prepended).split(":")[1] == tail and ends(prepended).split(":")[0] != head
    assert all(a != b for a, b in zip(ends(fresh).split(":"), (head, tail), strict=True))
    assert ends(torch.randn(8)) == ""  # too small to say
    assert ends(torch.randn(8, 8).t()) == ""  # not contiguous: not read
    assert ends(torch.ones(8, 8, dtype=torch.bfloat16))  # any dtype


def test_values_are_new_only_when_both_ends_change_at_every_sample():
    assert new_values(["a:b", "c:d", "e:f", "g:h", "i:j"])
    assert not new_values(["a:b", "a:d", "a:f", "a:h", "a:j"])  # the head carried: torch.cat([kept, new])
    assert not new_values(["a:b", "c:b", "e:b", "g:b", "i:b"])  # the tail carried: torch.cat([new, kept])
    assert not new_values(["a:b", "c:d", "e:f", "g:h"])  # too few samples
    assert not new_values(["a:b", "c:d", "", "g:h", "i:j"])  # one not read


def _loop(grow: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = torch.zeros(0, 4)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for step in range(30):
            n = 64 if grow else 64 + 16 * step  # the ramp: a larger batch each step
            x, y = torch.randn(n, 32), torch.randint(0, 4, (n,))
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if grow:
                seen = torch.cat([seen, out.detach()])  # carries every step's rows over
            tracker.step()
    return tracker.report()


def test_a_tensor_grown_by_concatenation_is_a_leak():
    report = _loop(grow=True)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "seen", str(report)


def test_a_batch_larger_each_step_is_no_leak():
    report = _loop(grow=False)
    assert report.verdict.value != "leak", str(report)
    x = next(s for s in report.suspects if s.location == "x")
    assert not x.leak and any("new values at both ends" in e for e in x.evidence), str(report)
