"""The profiler never changes what it watches: no strong references, same losses, nothing left installed."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import memleak


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))


def _no_saved_hooks():
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def _nothing_installed(model):
    for m in model.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            assert not getattr(m, name), f"{name} left on {type(m).__name__}"
    assert _no_saved_hooks(), "a saved-tensor hook is still active"
    assert torch._C._len_torch_function_stack() == 0, "a TorchFunctionMode is still active"


def test_user_tensors_die_while_tracking():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    refs = []
    kept = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for step in range(12):
            x = torch.randn(8, 16)
            out = model(x)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            kept.append(out)            # held across a deep step, then let go
            refs.append(weakref.ref(out))
            refs.append(weakref.ref(x))
            tracker.step()
            if step >= 2:
                kept.pop(0)
        kept.clear()
        del x, out, loss
        alive = [i for i, r in enumerate(refs) if r() is not None]
        assert alive == [], f"tensors kept alive while tracking: {alive}"
        # and a tensor made and dropped within one step dies at once
        t = torch.randn(4)
        r = weakref.ref(t)
        del t
        assert r() is None
        tracker.step()


def test_outputs_saved_for_backward_are_not_kept():
    """Saved-tensor tracking must not make a cycle through an output's grad_fn."""
    model = _model()
    with memleak.track(model, level="full") as tracker:
        refs = []
        for step in range(8):
            out = model(torch.randn(4, 16)).softmax(-1)  # softmax saves its output
            refs.append(weakref.ref(out))
            del out
            tracker.step()
        assert all(r() is None for r in refs)


def _train(track: bool, level: str = "full", steps: int = 10):
    model = _model(1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    losses = []

    def loop(tracker=None):
        for _ in range(steps):
            x = torch.randn(16, 16, generator=g)
            y = torch.randint(0, 3, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())

    if track:
        with memleak.track(model, optimizer=opt, level=level) as tracker:
            loop(tracker)
    else:
        loop()
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("level", ["modules", "full"])
def test_losses_identical_with_and_without_tracking(level):
    l0, p0 = _train(False)
    l1, p1 = _train(True, level)
    assert l0 == l1
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))


def test_inplace_error_still_raised_on_deep_steps():
    model = _model()
    with memleak.track(model, level="full") as tracker:
        for step in range(6):
            a = torch.randn(3, requires_grad=True)
            c = (a * 2).exp()
            c.add_(1)  # exp saved its output: backward must fail, as without memleak
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                c.sum().backward()
            tracker.step()


def test_everything_removed_when_the_loop_raises():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for step in range(10):
                loss = model(torch.randn(4, 16)).sum()
                loss.backward()
                opt.step()
                tracker.step()
                if step == 5:  # a deep step is open now or soon: raise in the middle of a step
                    model(torch.randn(2, 16))
                    raise ValueError("boom")
    _nothing_installed(model)
    assert opt._optimizer_step_post_hooks == {} or not opt._optimizer_step_post_hooks


@pytest.mark.parametrize("raise_at", range(1, 6))
def test_modes_and_hooks_removed_at_any_step(raise_at):
    model = _model()
    with pytest.raises(KeyError):
        with memleak.track(model, level="full") as tracker:
            for step in range(8):
                out = model(torch.randn(4, 16))
                if step == raise_at:
                    raise KeyError(step)
                out.sum().backward()
                tracker.step()
    _nothing_installed(model)
    gc.collect()


def test_a_users_own_saved_tensor_hooks_spanning_the_step_end_are_left_alone():
    """The step ends inside the user's `with save_on_cpu()`: memleak must not push over it."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memleak.track(model, optimizer=opt, level="full"):
        for step in range(8):
            with torch.autograd.graph.save_on_cpu():
                loss = model(torch.randn(4, 16)).sum()
                loss.backward()
                opt.step()  # ends the iteration inside the user's hooks
            assert _no_saved_hooks()
    _nothing_installed(model)


def test_a_class_made_during_the_run_is_not_kept_alive_after_it():
    """The census caches which types are tensors; a cache kept across walks would pin each class it saw."""
    from memleak.probes.census import take_census

    Payload = type("Payload", (), {"blob": bytearray(1 << 20)})
    obj = Payload()
    t = torch.zeros(8)
    assert take_census()["cpu"][1] >= 1  # a census walks every object, the Payload among them
    del t
    cls = weakref.ref(Payload)
    del Payload, obj
    gc.collect()
    assert cls() is None, "memleak keeps a class it saw during the run alive"


@pytest.mark.parametrize("level", ["counters", "modules", "full"])
def test_checkpointing_and_copying_the_model_inside_a_tracked_block(level, tmp_path):
    """torch.save(model) is in every training script; nothing memleak attaches may break it or ride on a copy."""
    import copy
    import io
    import pickle

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memleak.track(model, optimizer=opt, level=level):
        for step in range(4):
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            torch.save(model, tmp_path / f"model{step}.pt")
            torch.save(opt, io.BytesIO())
        pickle.dumps(model)
        twin = copy.deepcopy(model)
        twin(torch.randn(2, 16)).sum().backward()
    _nothing_installed(twin)
    _nothing_installed(model)
    restored = torch.load(tmp_path / "model3.pt", weights_only=False)
    _nothing_installed(restored)
    x = torch.randn(2, 16)
    assert torch.equal(restored(x), model(x))
