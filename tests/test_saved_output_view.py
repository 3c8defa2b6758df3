"""A custom autograd Function that saves a view of its own output leaks every forward run without
a backward (pytorch#94990): a cycle inside autograd's C++ graph. memleak's saved-tensor hooks must
leave that cycle as autograd makes it (the profiler does not change what it watches), and the
report names the Function."""

import gc
import weakref

import torch
from torch import nn

import memleak
from memleak.probes.tagging import Box, saved_view_of, unpack


class SavesOutputView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y.view(-1, y.shape[-1]))
        return y

    @staticmethod
    def backward(ctx, grad):
        (y2d,) = ctx.saved_tensors
        y = y2d.view(grad.shape)
        return y * (grad - (grad * y).sum(-1, keepdim=True))


class SavesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class _Untracked:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self):
        pass


def _eval_outputs_alive(tracker_factory, forward=lambda lin, x: SavesOutputView.apply(lin(x)), steps=12) -> int:
    """Forwards with no backward, each output dropped: how many outputs are still alive after."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 32)
    refs = []
    with tracker_factory(lin) as tracker:
        for _ in range(steps):
            y = forward(lin, torch.randn(8, 16))
            refs.append(weakref.ref(y))
            del y
            tracker.step()
    gc.collect()
    return sum(r() is not None for r in refs)


def test_the_cycle_autograd_makes_is_kept_as_it_is_untracked_at_every_level():
    untracked = _eval_outputs_alive(lambda m: _Untracked())
    assert untracked == 12  # autograd's own leak, without memleak
    for level in ("auto", "full"):
        assert _eval_outputs_alive(lambda m, level=level: memleak.track(m, level=level)) == untracked, level


def test_the_box_holds_what_autograd_would_a_leaf_itself_anything_else_detached():
    boxes = []

    def pack(t):
        box = Box(t if t.is_leaf else t.detach(), t._version, saved_view_of(t))
        boxes.append(box)
        return box

    x = torch.randn(3, 4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = SavesOutputView.apply(x * 2)
        z = SavesOutput.apply(x)
    view, out = boxes[0], boxes[-1]
    assert view.t._base is y and view.of == "SavesOutputView"
    assert out.t is not z and out.t.grad_fn is None and out.of == ""  # an output: no cycle through it
    z.sum().backward()
    assert torch.allclose(x.grad, x.exp())


def test_the_report_names_the_function_with_the_fix():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            loss = model(torch.randn(64, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            scores = SavesOutputView.apply(model[0](torch.randn(128, 16)))  # no torch.no_grad()
            scores.max().item()
            tracker.step()
    report = tracker.report()
    assert report.verdict == memleak.Verdict.LEAK, str(report)
    top = report.suspects[0]
    assert top.location == "SavesOutputView.saved_tensors", str(report)
    assert "pytorch#94990" in " ".join(top.evidence)
    assert "ctx.save_for_backward(out)" in top.fix


def _pack_live(x):
    return x  # the user's hook: the live tensor, grad_fn and all (no .detach())


def _unpack_live(x):
    return x


def _packed_tanh(lin, x):
    with torch.autograd.graph.saved_tensors_hooks(_pack_live, _unpack_live):
        return lin(x).tanh()  # tanh saves its output: packed as itself


def test_a_pack_hook_that_keeps_the_live_output_is_a_cycle_memleak_leaves_and_names():
    from memleak.probes.reach import cycle_of

    assert _eval_outputs_alive(lambda m: _Untracked(), _packed_tanh) == 12  # autograd's cycle, untracked
    assert _eval_outputs_alive(lambda m: memleak.track(m, level="full"), _packed_tanh) == 12
    x = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(_pack_live, _unpack_live):
        y = (x * 2).tanh()
        z = (x * 2).detach().tanh()  # no graph: nothing saved
    assert cycle_of(y) == "packed:_unpack_live"
    assert cycle_of(z) == ""
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), _unpack_live):
        w = (x * 2).tanh()
    assert cycle_of(w) == ""  # a detached pack: no cycle
    assert cycle_of((x * 2).tanh()) == ""  # no hooks: autograd keeps its output without the grad_fn
    y.sum().backward()  # frees the saved tensors, and the cycle
    assert cycle_of(y) == ""
