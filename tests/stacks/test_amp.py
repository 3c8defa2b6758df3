"""Mixed precision: bf16 autocast on CPU, with and without a GradScaler, at every level.

A GradScaler that finds inf gradients does not call optimizer.step(): that iteration must still
end (it used to merge into the next one), whether the loop zeroes the gradients before the
forward or after it."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from stacks.stack_harness import LEVELS, Ran, assert_clean, assert_leak_named, check_tracked_run, plant, tracked

OVERFLOW_AT = (5, 11, 17)  # iterations whose loss is made inf: the scaler skips their step


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def amp_loop(track, steps, leak=None, scaler=True, overflow=(), zero_grad_first=True):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scale = torch.amp.GradScaler("cpu", init_scale=2.0**8, enabled=scaler)
    losses, history, running = [], [], 0.0
    with track(model, optimizer=opt) as tracker:
        for i in range(steps):
            x = torch.randn(16, 32, generator=g)
            if zero_grad_first:
                opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            if i in overflow:
                loss = loss * float("inf")
            if not zero_grad_first:
                opt.zero_grad()
            scale.scale(loss).backward()
            scale.step(opt)
            scale.update()
            losses.append(loss.item())
            running = plant(leak, loss, model.fc1, x, history, running)
    return Ran(losses, tracker, [model], [opt])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("scaler", [False, True], ids=["autocast", "autocast+scaler"])
def test_same_losses_and_nothing_left(level, scaler):
    tracker = check_tracked_run(amp_loop, level, 16, scaler=scaler)
    assert tracker.iterations == 16
    if level == "full":
        assert_clean(tracker)


@pytest.mark.parametrize("zero_grad_first", [True, False], ids=["zero_grad-before-forward", "zero_grad-after"])
def test_a_skipped_scaler_step_still_ends_its_iteration(zero_grad_first):
    ran = amp_loop(tracked("counters"), 24, overflow=OVERFLOW_AT, zero_grad_first=zero_grad_first)
    assert [x for x in ran.losses if x == float("inf")] == [float("inf")] * 3  # three steps were skipped
    run = ran.tracker.run()
    assert len(run.steps) == 24
    # the next backward pass sees the gradients reset with no step since the last one; the skipped
    # iteration is recorded at the next optimizer step, before the iteration that step ends
    assert [e["step"] for e in run.events if e["event"] == "step_skipped"] == list(OVERFLOW_AT)
    assert "3 iterations whose optimizer step was skipped" in str(ran.tracker.report())


def test_consecutive_first_and_last_skips_each_end_an_iteration_and_count_once():
    # the scaler's updates and the gradient hook both see these skips: each is recorded once; the
    # first iteration's (before any step) and the last one's (after the last step: at close) too
    skipped = (0, 6, 7, 8, 15)
    ran = amp_loop(tracked("counters"), 16, overflow=skipped)
    run = ran.tracker.run()
    assert len(run.steps) == 16
    assert [e["step"] for e in run.events if e["event"] == "step_skipped"] == list(skipped)
    assert run.steps["optimizer_steps"].iloc[-1] == 16 - len(skipped)


def test_a_loop_that_skips_its_step_itself_still_ends_the_iteration():
    # no scaler: the gradient hook alone sees the gradients reset with no step in between
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with tracked("counters")(model, optimizer=opt) as tracker:
        for i in range(10):
            opt.zero_grad()
            loss = model(torch.randn(4, 32)).pow(2).mean()
            loss.backward()
            if i not in (3, 4):
                opt.step()
    assert tracker.iterations == 10
    assert [e["step"] for e in tracker.run().events if e["event"] == "step_skipped"] == [3, 4]


@pytest.mark.parametrize("tracked_optimizers", ["critic and generator", "generator only"])
def test_a_scaler_updated_after_each_critic_step_adds_no_iteration(tracked_optimizers):
    # a WGAN: the critic steps three times a round, the one scaler updated after each step; the
    # generator's step ends the round: four updates a round are not three skipped iterations
    torch.manual_seed(0)
    gen, critic = Net(), Net()
    opt_g, opt_c = torch.optim.SGD(gen.parameters(), lr=0.05), torch.optim.SGD(critic.parameters(), lr=0.05)
    scale = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    optimizers = [opt_c, opt_g] if tracked_optimizers == "critic and generator" else opt_g
    with tracked("counters")(gen, optimizer=optimizers) as tracker:
        for _ in range(6):
            for _ in range(3):
                opt_c.zero_grad()
                scale.scale(critic(torch.randn(4, 32)).pow(2).mean()).backward()
                scale.step(opt_c)
                scale.update()
            opt_g.zero_grad()
            scale.scale(gen(torch.randn(4, 32)).pow(2).mean()).backward()
            scale.step(opt_g)
            scale.update()
    assert tracker.iterations == 6
    assert not [e for e in tracker.run().events if e["event"] == "step_skipped"]


def test_tracker_step_with_a_scaler_counts_each_iteration_once():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scale = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    with tracked("counters")(model, optimizer=opt) as tracker:
        for i in range(12):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 32)).float().sum() * (float("inf") if i == 3 else 1.0)
            scale.scale(loss).backward()
            scale.step(opt)
            scale.update()
            tracker.step()
    assert tracker.iterations == 12
    assert not [e for e in tracker.run().events if e["event"] == "step_skipped"]


@pytest.mark.parametrize("leak", ["loss_list", "module_cache", "retained_graph"])
def test_planted_leaks_are_named_under_autocast_and_scaler(leak):
    ran = amp_loop(tracked("full"), 30, leak=leak, overflow=(9,))
    assert ran.tracker.iterations == 30
    assert_leak_named(ran.tracker, leak)


def test_everything_is_removed_when_the_loop_raises_mid_iteration():
    from stacks.stack_harness import _global_hooks, left_installed

    before = _global_hooks()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scale = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    with pytest.raises(KeyError):
        with tracked("full")(model, optimizer=opt):
            for i in range(3):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(torch.randn(4, 32)).float().sum()
                scale.scale(loss).backward()
                if i == 2:
                    raise KeyError("in the middle of an iteration, after its backward pass")
                scale.step(opt)
                scale.update()
    assert not left_installed([model], [opt], before)
