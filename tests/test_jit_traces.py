"""``torch.jit.trace`` called on every step: TorchScript's global compilation unit keeps each traced
function (with the tensors it captured as constants) for the rest of the process; the walk counts
them under ``torch.jit.trace(<name>)`` (probes/jit_traces.py) and the report names it with the fix
to trace once."""

from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.probes.jit_traces import base_name, graph_of, traced_functions


def test_base_names_drop_the_mangling():
    assert base_name("__torch__.___torch_mangle_5.M.forward") == "M.forward"
    assert base_name("__torch__.torch.nn.modules.linear.___torch_mangle_4.Linear.forward") == "Linear.forward"
    assert base_name("__torch__.f") == "f"


def test_a_traced_function_keeps_its_captured_tensor_as_a_constant():
    w = torch.randn(16, 4)

    def project(a):
        return a @ w

    torch.jit.trace(project, torch.ones(2, 16), check_trace=False)
    fn = traced_functions()[-1]
    nodes, consts = graph_of(fn)
    assert base_name(fn.qualified_name).endswith("project") and nodes >= 2
    assert any(t is w for t in consts)


def _loop(trace_each_step: bool, steps: int = 24, before: int = 1):
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(6)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    with torch.no_grad():
        for _ in range(before):
            exported = torch.jit.trace(model, x, check_trace=False)  # before the loop: fine
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):
            if trace_each_step:
                with torch.no_grad():
                    exported = torch.jit.trace(model, x, check_trace=False)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    del exported
    return tracker.report()


def test_a_module_traced_every_step_is_named_with_the_fix_to_trace_once():
    report = _loop(True)
    top = report.suspects[0]
    assert report.verdict.value == "leak"
    assert top.leak and top.location == "torch.jit.trace(Sequential.forward)", report.suspects[:3]
    assert "traced TorchScript functions" in " ".join(top.evidence)
    assert "Trace once, before the loop" in top.fix


def test_traces_from_before_tracking_do_not_hide_the_loops():
    """The process traced the same module many times before the loop (an earlier test, an export
    step): only the traces since tracking began count, so the loop's are not a small rise on a
    large level."""
    report = _loop(True, before=80)
    assert report.suspects[0].location == "torch.jit.trace(Sequential.forward)", report.suspects[:3]


def test_a_module_traced_once_names_no_trace():
    report = _loop(False)
    assert not any(s.leak and "torch.jit" in s.location for s in report.suspects), report.suspects[:3]


def test_a_function_traced_every_step_keeps_its_constants_and_is_named():
    model = nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(24):
            table = torch.randn(32, 256)  # captured: a constant of every trace

            def embed(a):
                return a @ table

            feats = torch.jit.trace(embed, x, check_trace=False)(x)
            opt.zero_grad()
            (model(x).sum() + feats.sum() * 0).backward()
            opt.step()
    top = tracker.report().suspects[0]
    assert top.leak and top.location == "torch.jit.trace(test_jit_traces.embed)", top
    assert "Trace once, before the loop" in top.fix and "constants" in top.fix
