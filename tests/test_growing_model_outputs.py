"""A model that gains parameters each step: its gradients are counted by the storage they keep
(probes/registry.py), and a step's output, made anew larger each step as the model grows, is no
leak of its own (one_tensor.unconfirmed)."""
from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.probes.registry import Registry
from tests import scenarios


def test_a_growing_model_is_named_first_and_its_growing_output_is_no_leak():
    mod = scenarios.load("leak_parameterlist_grows")
    made = []

    def factory(model, **kw):
        made.append(memleak.track(model, level="auto", **kw))
        return made[-1]

    mod.run(factory)
    report = made[-1].report()
    top = report.suspects[0]
    assert top.location == "prototypes" and top.leak, str(report)
    # the gradients keep the whole bases autograd gave them: they explain the heap's growth
    assert any("the symptom it explains: linear_growth of heap_bytes" in e for e in top.evidence), str(report)
    assert any("keeps its whole base" in e for e in top.evidence), str(report)
    logits = [s for s in report.suspects if s.location == "logits"]
    assert logits and not logits[0].leak, str(report)
    assert logits[0].fix.startswith("None needed for this tensor")


def test_the_registry_counts_a_stolen_gradient_view_by_the_storage_it_keeps():
    params = nn.ParameterList([nn.Parameter(torch.randn(64, 256)) for _ in range(4)])
    torch.stack(list(params)).mean(1).sum().backward()  # the first grads
    for p in params:
        p.grad = p.grad.clone()  # each its own storage
    registry = Registry()
    registry.rows(params)
    params.append(nn.Parameter(torch.randn(64, 256)))
    # the old grads accumulate in place; the new one is a view of the (5, 64, 256) base it keeps
    torch.stack(list(params)).mean(1).sum().backward()
    (row,) = registry.rows(params)
    one = 64 * 256 * 4
    assert row.grad_bytes == 4 * one + 5 * one, row.grad_bytes // one  # not five 64 KiB views
