"""What every stack test checks, in one place: run a loop untracked and tracked, compare the
losses bit for bit, and check that nothing memleak installed is left behind.

A stack is a function ``loop(track, steps, leak=None) -> Ran`` that builds its own model from a
fixed seed and runs under ``track(model, optimizer=...)``; ``track`` is either ``memleak.track``
with a level, or `untracked` (same shape, records nothing). ``leak`` names the planted leak to
add each iteration with `plant` (see LEAKS), or None for a clean loop.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, NamedTuple

import torch
import torch.nn.modules.module as module_hooks
import torch.optim.optimizer as optimizer_hooks

import memleak
from memleak.schema import Level

# The levels every stack is tested at, cheapest first; auto (the default) last: on these short
# loops it runs as full does through its young steps, by its own code path.
LEVELS = tuple(level.value for level in (Level.COUNTERS, Level.MODULES, Level.FULL, Level.AUTO))
# The levels below full (whose reference walk names any holder) that name one, and the planted leak
# each names: modules, through the attribute scan, a tensor cached on a module.
NAMING = {Level.MODULES.value: "module_cache"}
BELOW_FULL = tuple(level for level in LEVELS if level != Level.FULL.value)

# The planted leaks, and the holder the report must name for each.
LEAKS = {
    "loss_list": "history",  # history.append(loss): undetached losses, each with its graph
    "module_cache": "cache",  # a growing tensor list on a submodule (model.<sub>.cache)
    "retained_graph": "running",  # running = running + loss: one graph chained to the next
}


class Ran(NamedTuple):
    losses: list[float]
    tracker: Any
    models: list[torch.nn.Module]
    optimizers: list[torch.optim.Optimizer]


def plant(leak, loss, module, x, history, running):
    """Add this iteration's share of the planted leak; returns the new `running`."""
    if leak == "loss_list":
        history.append(loss)
    elif leak == "module_cache":
        if not hasattr(module, "cache"):
            module.cache = []
        module.cache.append(x.detach().float().repeat(4, 1))
    elif leak == "retained_graph":
        running = running + loss
    return running


class _Untracked:
    def step(self):
        pass


@contextlib.contextmanager
def untracked(model=None, **options):
    yield _Untracked()


def tracked(level, **extra):
    return functools.partial(memleak.track, level=level, **extra)


def _global_hooks():
    return (len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks),
            len(module_hooks._global_backward_hooks), len(optimizer_hooks._global_optimizer_pre_hooks),
            len(optimizer_hooks._global_optimizer_post_hooks))


def left_installed(models, optimizers=(), before=None) -> list[str]:
    """What memleak left: hooks on modules, parameters, optimizers, global hooks, modes
    (global hooks compared with `before`, a `_global_hooks()` taken earlier; None: none at all)."""
    before = (0, 0, 0, 0, 0) if before is None else before
    left = []
    for model in models:
        for m in model.modules():
            for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
                if getattr(m, name):
                    left.append(f"{name} on {type(m).__name__}")
        for p in model.parameters():
            if p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
                left.append("a hook on a parameter")
    for opt in optimizers:
        if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks:
            left.append(f"a step hook on {type(opt).__name__}")
    if _global_hooks() != before:
        left.append(f"global hooks {before} -> {_global_hooks()}")
    if torch._C._len_torch_function_stack():
        left.append("a TorchFunctionMode")
    if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
        left.append("a saved-tensor hook")
    return left


def check_tracked_run(loop, level, steps, **loop_args):
    """Run `loop` untracked, then tracked at `level`: the losses must be bit-identical and nothing
    may be left installed. Returns the tracker (closed)."""
    plain = loop(untracked, steps, **loop_args).losses
    before = _global_hooks()
    ran = loop(tracked(level), steps, **loop_args)
    assert ran.losses == plain, f"tracking at {level} changed the losses"
    assert all(isinstance(x, float) for x in ran.losses)
    left = left_installed(ran.models, ran.optimizers, before)
    assert not left, f"left installed after the run: {left}"
    return ran.tracker


def suspects_of(tracker):
    report = tracker.report()
    return report, [(s.kind.value, s.location) for s in report.suspects]


def assert_leak_named(tracker, leak):
    """The planted leak is the verdict's cause, and its holder is named."""
    report, suspects = suspects_of(tracker)
    holder = LEAKS[leak]
    assert report.verdict == "leak", f"{leak}: verdict {report.verdict}; suspects {suspects}"
    assert any(holder in loc for _, loc in suspects[:2]), f"{leak}: {holder} not named in {suspects}"


def assert_clean(tracker):
    report, suspects = suspects_of(tracker)
    assert report.verdict != "leak", f"a clean loop was reported leaking: {suspects}"
    assert not any(kind in ("retained_graph", "cached_tensor", "surviving_tensors") for kind, _ in suspects), suspects


def three_fits(fit, tmp_path_factory) -> dict:
    """An untracked, a clean tracked and a leaking tracked fit of a framework's trainer, each
    `fit(folder, tracked=..., leak=...)` -> (what holds its `loss_values`, callback)."""
    return {name: fit(tmp_path_factory.mktemp(name), tracked=name != "untracked", leak=name == "leak")
            for name in ("untracked", "clean", "leak")}


@contextlib.contextmanager
def reports_not_saved():
    """The framework callbacks write report.txt, report.html and PNG plots at each fit's end (about
    0.5 s a fit, most of it the PNG). The full-level fits check those files; fits at other levels
    skip writing them, to keep the suite fast (the report is still made and checked in memory)."""
    import pytest

    from memleak.report import Report

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Report, "save", lambda self, folder: [])
        yield


def fits_by_level(fit, tmp_path_factory, levels) -> dict:
    """For each of `levels`, a clean tracked fit, and where the level names holders (NAMING) a fit
    with that level's planted leak: ``{(level, leak or None): (what holds loss_values, callback)}``;
    `fit(folder, level=..., leak=...)` as in `three_fits`."""
    cases = [(level, None) for level in levels] + [(level, NAMING[level]) for level in levels if level in NAMING]
    with reports_not_saved():
        return {(level, leak): fit(tmp_path_factory.mktemp(f"{level}-{leak}"), level=level, leak=leak)
                for level, leak in cases}


def assert_fits_at_level(fits, by_level, level: str, models_of) -> None:
    """Every fit at `level` (clean, and with its planted leak): the untracked fit's losses, the
    callback's tracker closed, nothing left installed on `models_of(what holds loss_values)`."""
    untracked = fits["untracked"][0].loss_values
    for (lv, leak), (owner, cb) in by_level.items():
        if lv == level:
            assert owner.loss_values == untracked, (level, leak)
            assert cb.tracker is None and not left_installed(models_of(owner)), (level, leak)


def assert_fit_clean(report, steps: int) -> None:
    """A clean fit: every step recorded, and the verdict "clean" (not merely "inconclusive")."""
    assert len(report.run.steps) == steps
    assert report.verdict == "clean", str(report)


def assert_same_losses(fits, steps: int) -> None:
    """The clean tracked fit's losses are bit-identical to the untracked fit's."""
    untracked = fits["untracked"][0].loss_values
    assert len(untracked) == steps
    assert fits["clean"][0].loss_values == untracked
