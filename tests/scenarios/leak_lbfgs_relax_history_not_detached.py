"""Structure relaxation with a hand-written L-BFGS next to the training of the potential that
drives it (as torch-sim runs L-BFGS on a conservative force field): the positions carry
``requires_grad=True`` because the forces are ``-autograd.grad(energy, positions)``. The optimizer
state is updated out of place without ``detach()``: ``state.positions = positions + step`` and
``state.s_history = torch.cat([state.s_history, s_new[None]])[-m:]``, where ``step`` comes from the
two-loop recursion over the history (``(s_i * q).sum()`` saves ``s_i`` and ``q``). The history
keeps only ``m`` rows, but each step's positions and history hang off the previous step's graph:
one link per step, and every earlier step's saved tensors stay alive.

Real case: TorchSim/torch-sim https://github.com/TorchSim/torch-sim/pull/559 ("L-BFGS and BFGS
leak memory linearly in the number of optimizer steps when used with a model that requires
``positions.requires_grad=True``"; "``state.s_history = torch.cat([state.s_history,
s_new.unsqueeze(1)], dim=1)`` — ``s_new`` has ``grad_fn`` from positions ... Iterated → one link per
step"; "Three ``.detach()`` calls fix it").
"""
from types import SimpleNamespace

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "state.", "top": 1}
M = 5


class Potential(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, pos):  # (S, A, 3) -> energy per structure
        return self.net(pos).squeeze(-1).sum(-1)


def lbfgs_step(state, model):
    energy = model(state.positions).sum()
    forces = -torch.autograd.grad(energy, state.positions)[0]
    q = -forces
    if state.s_history.shape[0]:
        alphas = []
        for s, y, rho in zip(reversed(state.s_history), reversed(state.y_history), reversed(state.rho_history)):
            a = rho * (s * q).sum()
            q = q - a * y
            alphas.append(a)
        s, y = state.s_history[-1], state.y_history[-1]
        q = q * ((s * y).sum() / (y * y).sum())
        for (s, y, rho), a in zip(zip(state.s_history, state.y_history, state.rho_history), reversed(alphas)):
            b = rho * (y * q).sum()
            q = q + s * (a - b)
    else:
        q = q * 1e-2
    new_positions = state.positions - q  # keeps the graph of q, which reaches the history
    s_new = new_positions - state.positions
    y_new = -forces - state.prev_grad if state.prev_grad is not None else -forces
    rho_new = 1.0 / ((s_new * y_new).sum() + 1e-8)
    # the leak: none of these are detached
    state.s_history = torch.cat([state.s_history, s_new[None]])[-M:]
    state.y_history = torch.cat([state.y_history, y_new[None]])[-M:]
    state.rho_history = torch.cat([state.rho_history, rho_new[None]])[-M:]
    state.prev_grad = -forces
    state.positions = new_positions


def run(tracker_factory, steps=30):
    g = seed(163)
    model = Potential()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pos0 = torch.randn(32, 100, 3, generator=g)
    state = SimpleNamespace(
        positions=pos0.clone().requires_grad_(True),
        s_history=torch.zeros(0, *pos0.shape), y_history=torch.zeros(0, *pos0.shape),
        rho_history=torch.zeros(0), prev_grad=None,
    )
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            # train the potential on reference energies of fresh structures
            x = torch.randn(32, 100, 3, generator=g)
            target = (x.pow(2).sum(-1) - 1).pow(2).sum(-1)
            loss = nn.functional.mse_loss(model(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            # and relax the current structures one L-BFGS step with it
            lbfgs_step(state, model)
            tracker.step()
