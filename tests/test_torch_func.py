"""torch.func's transforms (grad, vjp, jacrev, hessian) refuse to run under saved-tensor hooks, and
memleak's deep steps push one: they step aside while a transform runs, so a torch.func loop runs
tracked as it does untracked, and torch's own `disable_saved_tensors_hooks` is back after the run."""
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import memleak

from tests.helpers import make_model

DISABLE = torch.autograd.graph.disable_saved_tensors_hooks


def _loop(level=None, steps=6):
    model = make_model()
    params = {k: v.detach() for k, v in model.named_parameters()}
    g = torch.Generator().manual_seed(2)

    def loss_fn(p, x, y):
        return nn.functional.mse_loss(functional_call(model, p, (x,)), y)

    per_sample = vmap(grad(lambda p, x, y: loss_fn(p, x[None], y[None])), in_dims=(None, 0, 0))
    tracker = memleak.track(model, level=level) if level else None
    if tracker is not None:
        tracker.start()
    try:
        for _ in range(steps):
            x, y = torch.randn(16, 64, generator=g), torch.randn(16, 1, generator=g)
            grads = grad(loss_fn)(params, x, y)
            norms = per_sample(params, x[:4], y[:4])["0.weight"].flatten(1).norm(dim=1)
            params = {k: p - 0.05 * grads[k] - 0.001 * norms.mean() for k, p in params.items()}
            if tracker is not None:
                tracker.step()
    finally:
        if tracker is not None:
            tracker.close()
    return params


def test_a_torch_func_loop_runs_tracked_as_it_does_untracked():
    untracked = _loop()
    for level in ("full", "auto"):
        tracked = _loop(level)
        assert all(torch.equal(tracked[k], untracked[k]) for k in untracked), level
        assert torch.autograd.graph.disable_saved_tensors_hooks is DISABLE


def test_memleak_saved_tensor_hooks_come_back_after_a_transform():
    model = make_model()
    ours = []  # the steps whose hooks were memleak's again after the transform
    with memleak.track(model, level="full") as tracker:
        for step in range(4):
            x = torch.randn(4, 64)
            model(x)  # the step's first forward starts a deep step (its hooks pushed) on deep steps
            grad(lambda w: (x @ w).sum())(torch.randn(64, 3))
            top = torch._C._autograd._top_saved_tensors_default_hooks(False)
            if top is not None and type(getattr(top[0], "__self__", None)).__name__ == "Tagging":
                ours.append(step)
            tracker.step()
    assert ours
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_a_tensor_a_torch_func_transform_wrapped_is_sized_by_what_it_wraps():
    """What a vjp_fn or a closure keeps from inside a transform is a functorch wrapper, which has no
    storage of its own: sized as 0 B, a list of kept vjp_fns ranked below the lines that made its
    tensors (opacus #521)."""
    from memleak.probes.identity import tensor_nbytes

    kept = []

    def f(x):
        kept.append(x)
        return x.sum()

    torch.func.grad(f)(torch.randn(100))
    assert torch._C._functorch.is_functorch_wrapped_tensor(kept[0])
    assert tensor_nbytes(kept[0])[1] == 400
