"""torch.compile (inductor: the default mode with fullgraph=True, and mode="reduce-overhead")
tracked at every level.

One compile per configuration and per side (untracked, tracked), shared by the assertions: the
tracked side runs the levels one after the other on one compiled model, so its losses compare
step by step with the untracked side's, and the dynamo counters of the two sides compare whole.
fullgraph=True makes any graph break memleak caused an error; the counters catch recompiles.
The first inductor compile in a process costs most of this module's time (~10 s).
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import memleak
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from stacks.stack_harness import LEVELS, left_installed

STEPS = 24  # per level; the live check and the trend need about this many
CONFIGS = {
    "default": {"fullgraph": True},
    "reduce-overhead": {"mode": "reduce-overhead"},  # CUDA graphs need CUDA: on CPU inductor alone
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(torch.relu(self.enc(x)))


def dynamo_counts() -> dict[str, int]:
    """What dynamo did since the last reset: frames compiled (recompiles included), graphs made,
    graph breaks, and the compiled versions of Net.forward (more than one: a recompile)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    return {
        "frames": counters["frames"]["total"],
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "forward_versions": len(_debug_get_cache_entry_list(Net.forward)),
    }


def batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 16, generator=g) for _ in range(n)]


def fresh(options):
    """A new model, its compiled wrapper and optimizer, after a dynamo reset (counters from zero)."""
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    torch.manual_seed(0)
    model = Net()
    return model, torch.compile(model, **options), torch.optim.SGD(model.parameters(), lr=0.05)


def loop(compiled, opt, xs, *, kept=None, module_cache=None):
    losses = []
    for x in xs:
        loss = compiled(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if kept is not None:
            kept.append(loss)  # the loop's leak: every step's loss, graph attached
        if module_cache is not None:
            module_cache.append(torch.ones(4096))  # a tensor cached on a submodule each step
    return losses


def side_by_side(config: str, tmp_path_factory) -> dict:
    options = CONFIGS[config]
    xs = batches(STEPS * len(LEVELS), seed=1)
    _, compiled, opt = fresh(options)
    untracked = loop(compiled, opt, xs)
    untracked_counts = dynamo_counts()
    model, compiled, opt = fresh(options)
    tracked, runs, leftover = [], {}, []
    for i, level in enumerate(LEVELS):
        out = tmp_path_factory.mktemp(f"{config}-{level}")
        with memleak.track(compiled, optimizer=opt, level=level, out=out) as t:
            tracked += loop(compiled, opt, xs[i * STEPS:(i + 1) * STEPS])
        runs[level] = t
        leftover.append(left_installed([compiled, model], [opt]))
    return {"untracked": untracked, "tracked": tracked, "counts": (untracked_counts, dynamo_counts()),
            "runs": runs, "leftover": leftover, "model": model, "compiled": compiled, "opt": opt}


@pytest.fixture(scope="module")
def default_mode(tmp_path_factory):
    return side_by_side("default", tmp_path_factory)


@pytest.fixture(scope="module")
def reduce_overhead(tmp_path_factory):
    return side_by_side("reduce-overhead", tmp_path_factory)


@pytest.fixture(params=["default_mode", "reduce_overhead"])
def pair(request):
    return request.getfixturevalue(request.param)


def test_losses_are_bit_identical_to_an_untracked_run(pair):
    assert pair["tracked"] == pair["untracked"]


def test_tracking_adds_no_graph_break_no_recompile_no_frame(pair):
    untracked, tracked = pair["counts"]
    print(untracked, tracked)
    assert untracked["graphs"] >= 1
    assert tracked == untracked


def test_every_level_runs_and_the_clean_run_is_clean(pair):
    for level, t in pair["runs"].items():
        report = t.report()
        assert len(report.run.steps) == STEPS, level
        assert not report.leak, (level, str(report))
        assert report.run.meta["model"] == "Net"


def test_modules_level_names_modules_by_the_original_tree(default_mode):
    run = default_mode["runs"]["modules"].run()
    records = run.module_records
    assert records and all(r.categories["parameter"] == (16 * 32 + 32 + 32 + 1) * 4 for r in records)
    assert "activation" not in records[0].categories  # not seen inside a compiled forward
    limited = [e for e in run.events if e.get("event") == "probe_limited"]
    assert limited and "original module tree" in limited[0]["reason"]


def test_hooks_and_modes_are_gone_after_each_level(pair):
    assert pair["leftover"] == [[]] * len(LEVELS)


def test_a_tensor_cached_on_a_submodule_is_named_by_its_path_without_orig_mod(default_mode):
    model, compiled, opt = default_mode["model"], default_mode["compiled"], default_mode["opt"]
    loop(compiled, opt, batches(1, seed=9))  # compiled again if another fixture reset dynamo since
    before = dynamo_counts()
    model.enc.seen = []
    with memleak.track(compiled, optimizer=opt, level="modules") as t:  # scans come every 8-12 steps
        loop(compiled, opt, batches(2 * STEPS, seed=2), module_cache=model.enc.seen)
    del model.enc.seen
    report = t.report()
    assert report.leak, str(report)
    assert report.suspects[0].location == "enc.seen", str(report)
    assert dynamo_counts() == before


def test_a_list_of_undetached_losses_is_named_at_level_full(default_mode):
    compiled, opt = default_mode["compiled"], default_mode["opt"]
    loop(compiled, opt, batches(1, seed=9))  # compiled again if another fixture reset dynamo since
    before = dynamo_counts()
    kept: list = []
    with memleak.track(compiled, optimizer=opt, level="full") as t:
        loop(compiled, opt, batches(STEPS, seed=3), kept=kept)
    report = t.report()
    assert report.leak, str(report)
    assert report.suspects[0].location == "kept", str(report)  # loop()'s name for the list
    assert dynamo_counts() == before


def test_a_step_the_grad_scaler_skips_still_ends_its_iteration(default_mode):
    # no gradient hook goes on a compiled model's parameters: the scaler's own updates show the skips
    compiled, opt = default_mode["compiled"], default_mode["opt"]
    loop(compiled, opt, batches(1, seed=9))  # compiled again if another fixture reset dynamo since
    before = dynamo_counts()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    skipped = (0, 4, 5, 9, 11)  # the first, two in a row, the last
    with memleak.track(compiled, optimizer=opt, level="counters") as t:
        for i, x in enumerate(batches(12, seed=4)):
            opt.zero_grad()
            loss = compiled(x).pow(2).mean() * (float("inf") if i in skipped else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    assert scaler.get_scale() == 2.0**8 / 2 ** len(skipped)  # the scaler did skip those steps
    run = t.run()
    assert len(run.steps) == 12
    assert [e["step"] for e in run.events if e["event"] == "step_skipped"] == list(skipped)
    assert dynamo_counts() == before


def skipping_loop(model, opt, xs, skipped, pattern):
    """A loop that skips ``optimizer.step()`` itself, without a GradScaler: "non-finite" makes the
    loss NaN in the `skipped` iterations and resets the gradients when it sees it; "on a condition"
    resets them first each iteration and steps only outside `skipped`."""
    losses = []
    for i, x in enumerate(xs):
        if pattern == "on a condition":
            opt.zero_grad()
        loss = model(x).pow(2).mean() * (float("nan") if pattern == "non-finite" and i in skipped else 1.0)
        loss.backward()
        losses.append(loss.item())
        if pattern == "non-finite" and not torch.isfinite(loss):
            opt.zero_grad()
            continue
        if i not in skipped:
            opt.step()
        if pattern == "non-finite":
            opt.zero_grad()
    return losses



SKIPS = {"non-finite": (0, 4, 5, 11), "on a condition": (0, 4, 5, 10)}  # the first, two in a row, the last


def same_loop_untracked_then_tracked(model, watched, opt, run_loop):
    """`run_loop()` untracked, then from the same weights tracked (on `watched`) at level counters:
    (untracked losses, tracked losses, the closed tracker, dynamo's counts before and after the
    tracked run: equal when tracking compiled nothing)."""
    start = {k: v.clone() for k, v in model.state_dict().items()}
    untracked = run_loop()
    model.load_state_dict(start)  # copied in place: the compiled code is reused
    before = dynamo_counts()
    with memleak.track(watched, optimizer=opt, level="counters") as t:
        tracked = run_loop()
    return list(map(repr, untracked)), list(map(repr, tracked)), t, (before, dynamo_counts())  # repr: NaN too


@pytest.mark.parametrize("pattern", SKIPS)
@pytest.mark.parametrize("kind", ["compiled", "eager"])
def test_a_loop_that_skips_its_step_itself_still_ends_each_iteration(default_mode, kind, pattern):
    # no scaler: the gradient hook on a parameter (called by the autograd engine, outside compiled
    # code) sees the gradients reset with no step since the last backward pass, compiled or not
    model, compiled, opt = default_mode["model"], default_mode["compiled"], default_mode["opt"]
    loop(compiled, opt, batches(1, seed=9))  # compiled again if another fixture reset dynamo since
    watched, skipped, xs = compiled if kind == "compiled" else model, SKIPS[pattern], batches(12, seed=5)
    untracked, tracked, t, (before, after) = same_loop_untracked_then_tracked(
        model, watched, opt, lambda: skipping_loop(watched, opt, xs, skipped, pattern))
    assert tracked == untracked
    assert after == before
    run = t.run()
    assert len(run.steps) == 12
    assert [e["step"] for e in run.events if e["event"] == "step_skipped"] == list(skipped)
    assert run.steps["optimizer_steps"].iloc[-1] == 12 - len(skipped)


def test_gradient_accumulation_under_compile_is_one_iteration_per_optimizer_step(default_mode):
    compiled, opt = default_mode["compiled"], default_mode["opt"]
    loop(compiled, opt, batches(1, seed=9))  # compiled again if another fixture reset dynamo since
    before = dynamo_counts()
    with memleak.track(compiled, optimizer=opt, level="counters") as t:
        for i, x in enumerate(batches(24, seed=6)):
            if i % 4 == 0:
                opt.zero_grad()
            (compiled(x).pow(2).mean() / 4).backward()  # four backward passes per step: no reset between
            if i % 4 == 3:
                opt.step()
    assert t.iterations == 6
    assert not [e for e in t.run().events if e["event"] == "step_skipped"]
    assert dynamo_counts() == before


def test_a_compiled_function_that_calls_backward_skipping_steps(default_mode):
    # backward() inside a compiled function runs after a graph break, with dynamo watching the
    # frames it calls: memleak's hooks run with dynamo off, so nothing more is compiled
    model, opt = default_mode["model"], default_mode["opt"]

    @torch.compile(backend="eager")  # dynamo alone: what it compiles is what this test counts
    def forward_backward(x):
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    def run_loop():
        losses = []
        for i, x in enumerate(batches(12, seed=7)):
            opt.zero_grad()
            losses.append(forward_backward(x).item())
            if i not in (3, 4):
                opt.step()
        return losses

    untracked, tracked, t, (before, after) = same_loop_untracked_then_tracked(model, model, opt, run_loop)
    assert tracked == untracked
    assert after == before and before["graph_breaks"] >= 1  # backward() did break the graph
    assert [e["step"] for e in t.run().events if e["event"] == "step_skipped"] == [3, 4]


# ---------------------------------------------------------------- a training step compiled whole

WHOLE_STEPS = 14  # per level: enough for the counters' trend and two deep steps at level full


def compiled_whole_step(levels, steps=WHOLE_STEPS, clean=None, step_calls=None):
    """torch's pattern for compiled optimizers: forward, backward, ``optimizer.step()`` and
    ``zero_grad()`` in one compiled function (dynamo alone: what it compiles is what is counted),
    after a dynamo reset, run once per level of `levels` (None: untracked) from the same weights, on
    the same batches, the loop keeping each step's loss undetached (its leak). The levels share
    the compiled function: one compiled under tracking serves the next tracker. Then, with `clean`
    a level, once more at that level keeping nothing (key "clean"); with `step_calls` a level, once
    more at that level with the loop calling ``tracker.step()`` (key "step_calls").
    Returns ({level: (losses, tracker)}, dynamo's counts)."""
    model, _, opt = fresh({})
    start = {k: v.clone() for k, v in model.state_dict().items()}

    @torch.compile(backend="eager")
    def train_step(x):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    runs = {}
    extra = [*((("clean", clean),) if clean else ()), *((("step_calls", step_calls),) if step_calls else ())]
    for key, level in [*((lv, lv) for lv in levels), *extra]:
        model.load_state_dict(start)  # copied in place: the compiled code is reused
        losses, kept = [], []
        with (memleak.track(model, optimizer=opt, level=level) if level else contextlib.nullcontext()) as tracker:
            for x in batches(steps, seed=8):
                loss = train_step(x)
                losses.append(loss.item())
                # outside the compiled function, scaled to 64 KiB a step: the loss alone, its graph
                # freed by backward, is ~5 KiB a step, which the counters call bounded
                if key != "clean":
                    kept.append(loss * torch.ones(16384))
                if key == "step_calls":
                    tracker.step()
        assert not left_installed([model], [opt]), level
        runs[key] = (losses, tracker)
    counts = dynamo_counts()
    counts["train_step_versions"] = len(_debug_get_cache_entry_list(train_step._torchdynamo_orig_callable))
    counts["step_wrapper_versions"] = len(_debug_get_cache_entry_list(type(opt).step))  # torch's, around SGD.step
    return runs, counts


@pytest.fixture(scope="module")
def whole_step():
    untracked, counts = compiled_whole_step([None])
    runs, tracked_counts = compiled_whole_step(LEVELS, clean="auto", step_calls="full")
    return untracked[None][0], counts, runs, tracked_counts


@pytest.mark.parametrize("level", LEVELS)
def test_a_step_compiled_whole_compiles_the_same_tracked_and_untracked(whole_step, level):
    untracked, counts, runs, tracked_counts = whole_step
    assert counts["graph_breaks"] >= 3 and counts["train_step_versions"] == 1  # backward, the optimizer's own breaks
    # graphs, graph breaks, compiled versions: the same, all levels run; frames: one fewer (docs/stacks.md)
    assert {**tracked_counts, "frames": 0} == {**counts, "frames": 0}
    assert tracked_counts["frames"] <= counts["frames"]
    losses, tracker = runs[level]
    assert losses == untracked
    assert tracker.iterations == WHOLE_STEPS  # one per optimizer.step(), inside compiled code


@pytest.mark.parametrize("level", LEVELS)
def test_a_step_compiled_whole_still_shows_the_losses_kept_by_the_loop(whole_step, level):
    report = whole_step[2][level][1].report()
    assert report.leak, str(report)
    if level in ("full", "auto"):  # the reference walk names the list
        assert report.suspects[0].location == "kept", str(report)
    if level != "counters":  # hooks and modes stayed out of the compiled step: said in the run
        limited = [e for e in report.run.events if e.get("event") == "probe_limited"]
        assert limited and "compiled whole" in limited[0]["reason"], limited


def test_a_clean_step_compiled_whole_is_clean(whole_step):
    losses, tracker = whole_step[2]["clean"]  # level auto (the default), after the leaking runs
    assert losses == whole_step[0] and tracker.iterations == WHOLE_STEPS
    report = tracker.report()
    assert not report.leak, str(report)


def test_a_step_compiled_whole_with_tracker_step_calls_compiles_the_same(whole_step):
    """The loop ends its iterations itself: the first call sees the step ran compiled (the weights
    changed, no step hook ran), before level full installs a hook or a mode (counted above)."""
    losses, tracker = whole_step[2]["step_calls"]
    assert losses == whole_step[0] and tracker.iterations == WHOLE_STEPS
    report = tracker.report()
    assert report.leak and report.suspects[0].location == "kept", str(report)


BEFORE_STEPS = 8  # per run: every step an iteration, and the counts steady after the first run


@pytest.fixture(scope="module")
def compiled_before():
    """The step compiled whole by an untracked run, then tracked at every level, one after the other."""
    return compiled_whole_step([None, *LEVELS], steps=BEFORE_STEPS)


def test_a_step_compiled_before_tracking_starts_is_not_compiled_again(whole_step, compiled_before):
    """Dynamo guards on the number of the optimizer's step hooks: memleak adds none to a step it
    finds compiled already (outside_compile.step_compiled_before), and its global hook is never
    compiled as a frame of its own; each step is seen from the parameter it changed."""
    untracked_counts = whole_step[1]  # the same function compiled and run untracked alone
    runs, counts = compiled_before
    assert untracked_counts["step_wrapper_versions"] == 1
    assert counts == untracked_counts  # frames, graphs, graph breaks, versions of train_step and of the wrapper
    for level in LEVELS:
        losses, tracker = runs[level]
        assert losses == runs[None][0], level
        assert tracker.iterations == BEFORE_STEPS, level


def test_only_the_optimizer_whose_step_dynamo_compiled_goes_without_step_hooks():
    """Dynamo's guards match the optimizer by id, which a new optimizer may reuse once the compiled
    one is gone (seen in this suite: a GradScaler loop then counted twice its iterations); a step
    dynamo traced also marked the optimizer's parameters static, and both must hold."""
    from memleak.recorder.outside_compile import step_compiled_before

    model, _, opt = fresh({})
    assert not step_compiled_before(opt)  # nothing compiled yet

    @torch.compile(backend="eager")
    def train_step(x):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    for x in batches(2, seed=10):
        train_step(x)
    other = torch.optim.SGD(Net().parameters(), lr=0.05)  # the same class and shapes, never compiled
    assert step_compiled_before(opt) and not step_compiled_before(other)
    first = opt.param_groups[0]["params"][0]
    del first._dynamo_static_input_type  # as a new optimizer at the old one's id would look
    assert not step_compiled_before(opt)
    with memleak.track(model, optimizer=opt, level="counters"):
        assert opt._optimizer_step_pre_hooks and opt._optimizer_step_post_hooks  # hooked as usual
