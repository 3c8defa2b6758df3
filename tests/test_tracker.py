"""The Tracker behind memleak.track and memleak.watch: boundaries, lifecycle, safety."""
import gc
import weakref

import pytest
import torch

import memleak
from memleak.errors import UsageError
from memleak.io import run_from_records
from helpers import make_model, train

KIB = 1024


def all_module_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
               + len(getattr(m, "_backward_pre_hooks", {})) for m in model.modules())


def test_each_optimizer_step_ends_an_iteration(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters"):
        train(model, opt, 7)
    run = memleak.load(tmp_path)
    assert list(run.steps["step"]) == list(range(7))
    assert (run.steps["duration"] > 0).all()


def test_a_gan_tracked_by_its_discriminator_s_optimizer_has_no_skipped_steps(tmp_path):
    g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_g, opt_d = torch.optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(d.parameters(), lr=0.1)
    with memleak.track(d, optimizer=opt_d, out=tmp_path, level="counters"):
        for _ in range(8):  # the generator's step, memleak not told of it, comes between two resets
            fake = g(torch.randn(2, 4))
            opt_d.zero_grad(), d(fake.detach()).sum().backward(), opt_d.step()
            opt_g.zero_grad(), d(fake).sum().backward(), opt_g.step()
    run = memleak.load(tmp_path)
    assert len(run.steps) == 8 and not [e for e in run.events if e["event"] == "step_skipped"]


def test_manual_steps_take_over_from_the_optimizer(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        train(model, opt, 6, tracker=tracker)  # optimizer.step() then tracker.step() each iteration
    assert len(memleak.load(tmp_path).steps) == 6


def test_once_manual_steps_take_over_the_users_backward_and_optimizer_run_only_the_step_hooks(tmp_path):
    """The gradient hook and the GradScaler's global step hook tell iterations apart by what the
    optimizer did; once tracker.step() ends them they only cost time in the user's steps."""
    from torch.optim.optimizer import _global_optimizer_post_hooks

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = next(model.parameters())
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        assert first._backward_hooks and _global_optimizer_post_hooks  # watching the optimizer's steps
        train(model, opt, 3, tracker=tracker)
        assert not first._backward_hooks and not _global_optimizer_post_hooks
        assert opt._optimizer_step_post_hooks  # still counts its steps
    run = memleak.load(tmp_path)
    assert list(run.steps["optimizer_steps"]) == [1, 2, 3]
    assert not opt._optimizer_step_post_hooks and not opt._optimizer_step_pre_hooks


def test_manual_steps_without_optimizer():
    with memleak.track(level="counters") as tracker:
        for _ in range(4):
            tracker.step()
    assert len(tracker.run().steps) == 4


def test_watch_counts_calls_and_works_bare(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @memleak.watch(model, optimizer=opt, out=tmp_path, level="counters")
    def train_step(x):
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()  # must not count as a second boundary
        return loss.item()

    for _ in range(5):
        train_step(torch.randn(4, 64))
    assert len(train_step.tracker.run().steps) == 5
    train_step.tracker.close()

    @memleak.watch
    def noop():
        return 3

    assert noop() == 3 and noop() == 3
    assert len(noop.tracker.run().steps) == 2
    noop.tracker.close()


def test_exception_propagates_unchanged_and_everything_is_undone(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    boom = ValueError("boom")
    with pytest.raises(ValueError) as info:
        with memleak.track(model, optimizer=opt, out=tmp_path, level="full") as tracker:
            train(model, opt, 3)
            raise boom
    assert info.value is boom
    assert all_module_hooks(model) == 0
    assert len(opt._optimizer_step_post_hooks) == 0
    assert tracker.sink._fh is None  # file closed
    assert len(memleak.load(tmp_path).steps) == 3


def test_out_of_memory_records_an_event_with_final_counters(tmp_path):
    with pytest.raises(torch.OutOfMemoryError):
        with memleak.track(out=tmp_path, level="counters") as tracker:
            tracker.step()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    run = memleak.load(tmp_path)
    oom = [e for e in run.events if e["event"] == "oom"]
    assert len(oom) == 1
    assert oom[0]["step"] == 1 and "Tried to allocate" in oom[0]["message"]
    assert oom[0]["rss_bytes"] > 0


@pytest.mark.parametrize("level", ["counters", "modules", "full"])
def test_tracker_keeps_no_reference_to_user_tensors(level):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        x = torch.randn(8, 64)
        ref = weakref.ref(x)
        loss = model(x).sum()
        loss.backward()
        opt.step()
        del x, loss
        gc.collect()
        assert ref() is None, "the tracker kept a user tensor alive"
        train(model, opt, 2)
    del tracker
    gc.collect()


@pytest.mark.parametrize("level", ["counters", "modules", "full"])
def test_losses_are_bit_identical_with_and_without_tracking(level):
    model = make_model(seed=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    plain = train(model, opt, 12)
    model = make_model(seed=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with memleak.track(model, optimizer=opt, level=level):
        tracked = train(model, opt, 12)
    assert plain == tracked


@pytest.mark.parametrize("level", ["counters", "full"])
def test_planted_leak_is_found_within_30_steps_and_its_absence_is_clean(level):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep: list = []
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        train(model, opt, 30, keep=keep, leak_bytes=256 * KIB)
    report = tracker.report()
    assert report.verdict == "leak", str(report)

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        train(model, opt, 30)
    assert tracker.report().verdict == "clean"


def test_live_report_and_report_from_the_file_agree(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep: list = []
    with memleak.track(model, optimizer=opt, out=tmp_path, level="counters") as tracker:
        train(model, opt, 30, keep=keep, leak_bytes=256 * KIB)
    live = memleak.analyze(run_from_records(tracker.sink.records))
    from_file = memleak.analyze(memleak.load(tmp_path))
    assert live.verdict == from_file.verdict == "leak"
    assert [(s.kind, s.location) for s in live.suspects] == [(s.kind, s.location) for s in from_file.suspects]


def test_header_describes_the_run(tmp_path):
    model = make_model()
    with memleak.track(model, out=tmp_path / "x.jsonl", level="counters") as tracker:
        tracker.step()
    meta = memleak.load(tmp_path / "x.jsonl").meta
    for key in ("schema", "memleak_version", "torch_version", "python_version", "device", "host", "pid",
                "rank", "world_size", "start_time", "argv", "pytorch_cuda_alloc_conf", "level"):
        assert key in meta, key
    assert meta["device"] == "cpu" and meta["parameter_bytes"] == sum(p.numel() * 4 for p in model.parameters())


def test_wrong_arguments_say_what_is_accepted():
    with pytest.raises(UsageError, match="level must be one of"):
        memleak.track(level="everything")
    with pytest.raises(UsageError, match="torch.nn.Module"):
        memleak.track(model=[1, 2])
    with pytest.raises(UsageError, match="Optimizer"):
        memleak.track(optimizer="adam")
    tracker = memleak.track(level="counters")
    with pytest.raises(UsageError, match="outside the tracked block"):
        tracker.step()
    with tracker:
        pass
    with pytest.raises(UsageError, match="already started"):
        tracker.start()


def test_record_history_needs_a_folder_and_is_skipped_without_cuda(tmp_path):
    with pytest.raises(UsageError, match="record_history needs out="):
        memleak.track(record_history=True)
    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    with memleak.track(out=tmp_path, level="counters", record_history=True) as tracker:
        tracker.step()
    skipped = [e for e in memleak.load(tmp_path).events if e["event"] == "probe_skipped"]
    assert any(e["probe"] == "history" and "CUDA" in e["reason"] for e in skipped)


@pytest.mark.cuda
def test_a_real_oom_dumps_a_snapshot_next_to_the_run(tmp_path):
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError):
        with memleak.track(out=tmp_path, level="counters", device="cuda", record_history=10_000) as tracker:
            keep = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
            tracker.step()
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    del keep
    run = memleak.load(tmp_path)
    oom = [e for e in run.events if e["event"] == "oom"]
    assert oom and oom[0]["allocated_bytes"] >= 8 << 20
    snap = [e for e in run.events if e["event"] == "snapshot"]
    assert snap, run.events
    snapshot = memleak.load(tmp_path / snap[0]["path"])
    assert len(snapshot.segments) > 0 and (snapshot.trace["action"] == "oom").any()
    assert "snapshot written" in str(memleak.analyze(run))
