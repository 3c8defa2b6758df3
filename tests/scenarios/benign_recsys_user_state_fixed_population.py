"""A hierarchical session-based recommender (HGRU4Rec-style) trained on a closed user base: the
user-level GRU state carried across each user's sessions is kept in ``user_state``, a dict from
user id to the detached hidden vector, for a fixed population of 1,500 users. Batches of 256 users
drawn at random keep adding users the dict has not seen during the first epoch-worth of steps, at
a falling rate (about 256, then 210, then 170 ... new users a step), until every user has an entry;
after that each step only overwrites entries. Growth that slows and saturates looks like a leak
early on, but the dict is bounded by the number of users.

Real case: the per-user state of mquad/hgru4rec (https://github.com/mquad/hgru4rec/issues/10,
where memory grew through the first epoch on 28 million interactions), here on a population small
enough for the state to fit: one vector per user, no more.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

N_ITEMS = 2000
H = 64


class HRNN(nn.Module):
    def __init__(self, n_items=N_ITEMS, d=64, h=H):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, d)
        self.session_gru = nn.GRU(d, h, batch_first=True)
        self.user_gru = nn.GRUCell(h, h)
        self.user_to_session = nn.Linear(h, h)
        self.out = nn.Linear(h, n_items)

    def forward(self, items, user_h):
        h0 = torch.tanh(self.user_to_session(user_h))[None]
        out, last = self.session_gru(self.item_emb(items), h0)
        return self.out(out), self.user_gru(last[0], user_h)


def run(tracker_factory, steps=30):
    g = seed(4112)
    model = HRNN()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    user_state = {}
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            users = torch.randint(0, 1500, (256,), generator=g).tolist()
            sessions = torch.randint(0, N_ITEMS, (256, 9), generator=g)
            user_h = torch.stack([user_state.get(u, torch.zeros(H)) for u in users])
            logits, new_user_h = model(sessions[:, :-1], user_h)
            loss = nn.functional.cross_entropy(logits.reshape(-1, N_ITEMS), sessions[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            for u, h in zip(users, new_user_h.detach()):
                user_state[u] = h.clone()  # one entry per user of a fixed population of 1500
            tracker.step()
