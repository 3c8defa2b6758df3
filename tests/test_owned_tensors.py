"""What a run owns legitimately (`probes/identity.py`): parameters, gradients, buffers and optimizer
state, found in one pass over the modules, each once, as torch's own iterators give them."""
from __future__ import annotations

import torch
from torch import nn

from memleak.probes.identity import excluded_ids, params_and_buffers


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight  # one parameter at two paths
        self.norm = nn.BatchNorm1d(8)  # buffers
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)  # in the model, not in the optimizer
        self.register_buffer("unset", None)

    def forward(self, x):
        return self.head(self.frozen(self.norm(self.emb(x))))


def _trained():
    model = Tied()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loss = model(torch.randint(0, 10, (4,))).sum()
    loss.backward()
    opt.step()
    return model, opt


def test_params_and_buffers_are_what_torch_iterates_each_once():
    model, _ = _trained()
    params, buffers = params_and_buffers(model)
    assert [id(p) for p in params] == [id(p) for p in model.parameters()]
    assert [id(b) for b in buffers] == [id(b) for b in model.buffers()]
    assert params_and_buffers(None) == ([], [])


def test_excluded_ids_cover_parameters_gradients_buffers_and_optimizer_state_only():
    model, opt = _trained()
    ids, ptrs = excluded_ids(model, opt)
    owned = [*model.parameters(), *model.buffers()]
    owned += [p.grad for p in model.parameters() if p.grad is not None]
    owned += [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    assert ids == {id(t) for t in owned}
    assert ptrs == {t.data_ptr() for t in owned} - {0}
    activation = model.emb(torch.randint(0, 10, (4,)))
    assert id(activation) not in ids and activation.data_ptr() not in ptrs


def test_a_buffer_that_carries_a_graph_is_not_owned_and_its_grad_is_not_read(recwarn):
    model, opt = _trained()
    model.register_buffer("made", model.emb.weight * 2)  # a non-leaf: reading its .grad warns
    ids, _ = excluded_ids(model, opt)
    # a buffer with a grad_fn (a running statistic updated with grad on) is walked as an attribute
    assert id(model.made) not in ids and id(model.norm.running_mean) in ids
    assert not [w for w in recwarn if ".grad attribute" in str(w.message)]
