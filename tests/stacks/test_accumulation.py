"""Loops whose iterations are not one forward, one backward, one step: gradient accumulation, a
GAN with two optimizers, a learning-rate scheduler, LBFGS with a closure.

The rule (docs/stacks.md): an iteration is one optimizer step of the optimizer that ends it (the
last one given to memleak.track), however many forward and backward passes it takes; with two
optimizers, one round of both is one iteration."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from stacks.stack_harness import LEVELS, Ran, assert_clean, assert_leak_named, check_tracked_run, plant, tracked

ACCUMULATE = 4


def _mlp(d_in=16, d_out=1):
    return nn.Sequential(nn.Linear(d_in, 32), nn.Tanh(), nn.Linear(32, d_out))


def accumulation_loop(track, steps, leak=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, history, running = [], [], 0.0
    with track(model, optimizer=opt) as tracker:
        for _ in range(steps):
            for _ in range(ACCUMULATE):
                x = torch.randn(8, 16, generator=g)
                loss = model(x).pow(2).mean() / ACCUMULATE
                loss.backward()
                losses.append(loss.item())
            opt.step()
            opt.zero_grad()
            running = plant(leak, loss, model[0], x, history, running)
    return Ran(losses, tracker, [model], [opt])


def gan_loop(track, steps, leak=None, detach=True):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    gen, disc = _mlp(8, 16), _mlp(16, 1)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
    losses, history, running = [], [], 0.0
    with track(gen, optimizer=[opt_d, opt_g]) as tracker:  # the generator's step ends each round
        for _ in range(steps):
            real = torch.randn(8, 16, generator=g)
            fake = gen(torch.randn(8, 8, generator=g))
            opt_d.zero_grad()
            # without detach, the discriminator's backward also writes the generator's gradients
            loss_d = bce(disc(real), ones) + bce(disc(fake.detach() if detach else fake), zeros)
            loss_d.backward(retain_graph=not detach)
            opt_d.step()
            opt_g.zero_grad()
            loss_g = bce(disc(fake), ones)
            loss_g.backward()
            opt_g.step()
            losses += [loss_d.item(), loss_g.item()]
            running = plant(leak, loss_g, gen[0], real, history, running)
    return Ran(losses, tracker, [gen, disc], [opt_d, opt_g])


def scheduler_loop(track, steps, leak=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
    losses, history, running = [], [], 0.0
    with track(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(8, 16, generator=g)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            running = plant(leak, loss, model[0], x, history, running)
    return Ran(losses, tracker, [model], [opt])


def lbfgs_loop(track, steps, leak=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = _mlp()
    # LBFGS keeps its last history_size updates: memory grows until the history is full (100
    # updates by default, 25 steps here), which a short run rightly sees as growth; a short history
    # fills in the first two steps
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=8)
    losses, history, running = [], [], 0.0
    with track(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(8, 16, generator=g)

            def closure():
                opt.zero_grad()  # inside step(): these calls and backward passes are one iteration
                loss = model(x).pow(2).mean()
                loss.backward()
                return loss

            loss = opt.step(closure)
            losses.append(loss.item())
            running = plant(leak, loss, model[0], x, history, running)
    return Ran(losses, tracker, [model], [opt])


def gan_no_detach_loop(track, steps, leak=None):
    return gan_loop(track, steps, leak, detach=False)


STACKS = {"accumulation": accumulation_loop, "gan": gan_loop, "gan-no-detach": gan_no_detach_loop,
          "scheduler": scheduler_loop, "lbfgs": lbfgs_loop}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_one_iteration_per_optimizer_step_same_losses_nothing_left(stack, level):
    tracker = check_tracked_run(STACKS[stack], level, 10)
    assert tracker.iterations == 10
    assert [e["kind"] for e in tracker.run().events if e["event"] == "boundary"] == ["optimizer"]
    assert not [e for e in tracker.run().events if e["event"] == "step_skipped"]


@pytest.mark.parametrize("stack", ["accumulation", "gan", "scheduler", "lbfgs"])
def test_a_clean_run_is_clean(stack):
    assert_clean(STACKS[stack](tracked("full"), 30).tracker)


@pytest.mark.parametrize(("stack", "leak"), [
    ("accumulation", "loss_list"), ("gan", "retained_graph"), ("scheduler", "module_cache"), ("lbfgs", "loss_list")])
def test_planted_leaks_are_named(stack, leak):
    assert_leak_named(STACKS[stack](tracked("full"), 30, leak=leak).tracker, leak)
