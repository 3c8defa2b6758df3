"""A loop run inside one torch.autocast block that makes new leaf parameters each step: the block's
cast cache keeps a copy of each until it exits (native memory no variable reaches), and it is named;
autocast entered around each step's forward, or with its cache off, is not."""
import contextlib

import torch
from torch import nn

import memleak
from memleak.detect.autocast import LOCATION

STEPS = 30
D = 256


def _loop(whole: bool, cache: bool = True):
    torch.manual_seed(0)
    backbone = nn.Linear(64, D)
    opt = torch.optim.SGD(backbone.parameters(), lr=1e-3)
    block = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache)
    with memleak.track(backbone, optimizer=opt, level="full") as tracker:
        with block if whole else contextlib.nullcontext():
            for _ in range(STEPS):
                head = nn.Linear(D, D)  # a fresh leaf each step: its bf16 cast is cached
                with contextlib.nullcontext() if whole else torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = head(backbone(torch.randn(32, 64))).float().pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    return tracker.report()


def test_a_loop_inside_one_autocast_block_making_new_leaves_is_named():
    report = _loop(whole=True)
    assert report.verdict.value == "leak", str(report)
    top = report.suspects[0]
    assert top.location == LOCATION and top.kind.value == "cached_tensor", str(report)
    assert "torch.clear_autocast_cache()" in top.fix
    assert report.run.steps["autocast_cached"].eq(1).all()


def test_autocast_around_the_forward_or_without_its_cache_is_no_suspect():
    for report in (_loop(whole=False), _loop(whole=True, cache=False)):
        assert all(s.location != LOCATION for s in report.suspects), str(report)
        assert report.verdict.value != "leak", str(report)
