"""A hierarchical session-based recommender (HGRU4Rec-style): a session GRU scores the next item,
and a user-level GRU state carried across each user's sessions initialises the next session. The
trainer keeps that user state in ``user_state``, a dict from user id to the detached hidden
vector, and never evicts it. Users come from a population of millions and each batch brings
mostly users never seen before, so the dict gains about a batch (128) of 64-float vectors (plus one
tensor object each) every step, without bound.

Real case: mquad/hgru4rec https://github.com/mquad/hgru4rec/issues/10 ("Incremental Memory":
training HGRU4Rec on 28 million interactions, free memory falls from 227 GB to 107 GB within the
first epoch and the process runs out of memory); the per-id state that grows with the number of
distinct users is the same growth as alibaba/x-deeplearning
https://github.com/alibaba/x-deeplearning/issues/45 (hash embeddings keyed by id: "the memory
usage go up to 10GB after 1 minute").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "user_state", "top": 1}

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
    g = seed(4111)
    model = HRNN()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    user_state = {}
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            users = torch.randint(0, 5_000_000, (128,), generator=g).tolist()
            sessions = torch.randint(0, N_ITEMS, (128, 9), generator=g)
            user_h = torch.stack([user_state.get(u, torch.zeros(H)) for u in users])
            logits, new_user_h = model(sessions[:, :-1], user_h)
            loss = nn.functional.cross_entropy(logits.reshape(-1, N_ITEMS), sessions[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            for u, h in zip(users, new_user_h.detach()):
                user_state[u] = h.clone()  # the leak: one entry per user ever seen, never evicted
            tracker.step()
