"""Activation checkpointing (torch.utils.checkpoint, use_reentrant False and True) at every level.

memleak's saved-tensor hooks and creation-site mode are on during the forward and during the
recomputation in backward: they must not break it (the same losses), and the tensors recomputed
in backward, which die with it, must not be counted as survivors or saved tensors that outlive
their step."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from stacks.stack_harness import LEVELS, Ran, assert_clean, assert_leak_named, check_tracked_run, plant, tracked


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(x)))


class Net(nn.Module):
    def __init__(self, reentrant, d=32):
        super().__init__()
        self.reentrant = reentrant
        self.blocks = nn.ModuleList(Block(d) for _ in range(2))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def checkpoint_loop(track, steps, leak=None, reentrant=False):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(reentrant)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, history, running = [], [], 0.0
    with track(model, optimizer=opt) as tracker:
        for _ in range(steps):
            # the reentrant variant needs an input that requires grad for gradients to reach the blocks
            x = torch.randn(16, 32, generator=g).requires_grad_(reentrant)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            running = plant(leak, loss, model.blocks[0], x, history, running)
    return Ran(losses, tracker, [model], [opt])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_same_losses_and_nothing_left(level, reentrant):
    tracker = check_tracked_run(checkpoint_loop, level, 16, reentrant=reentrant)
    assert tracker.iterations == 16
    if level == "full":
        assert_clean(tracker)
        run = tracker.run()
        # recomputed activations die in their backward: no saved tensor outlives its step
        assert all(not rec.cohorts for rec in run.saved), [rec.cohorts for rec in run.saved if rec.cohorts]
        assert run.saved, "saved-tensor tracking did not run"


@pytest.mark.parametrize(("leak", "reentrant"), [
    ("loss_list", False), ("module_cache", False), ("retained_graph", True)])
def test_planted_leaks_are_named_under_checkpointing(leak, reentrant):
    ran = checkpoint_loop(tracked("full"), 30, leak=leak, reentrant=reentrant)
    assert_leak_named(ran.tracker, leak)
