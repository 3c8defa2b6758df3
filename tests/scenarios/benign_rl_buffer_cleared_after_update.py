"""A REINFORCE agent collecting a batch of episodes into lists, training on them and then clearing
them (the fix): the lists refill to the same size every update, no growth.

Real case: the fix in https://github.com/Lightning-Universe/lightning-bolts/pull/425 ("clears
replay buffer (states, actions, qvals lists) after each training batch"), for lightning-bolts#399.
"""
import torch

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

GAMMA = 0.99
EPISODES_PER_BATCH = 3


def run(tracker_factory, steps=30):
    g = seed(502)
    net = MLP(hidden=64, d_out=4)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    batch_states, batch_actions, batch_qvals = [], [], []
    with tracker_factory(net, optimizer=opt) as tracker:
        for step in range(steps):
            states = torch.randn(48, DIM, generator=g)
            with torch.no_grad():
                probs = torch.softmax(net(states), -1)
            actions = torch.multinomial(probs, 1, generator=g).squeeze(1)
            rewards = torch.rand(48, generator=g)
            q = torch.flip(torch.cumsum(torch.flip(rewards, [0]), 0), [0])
            batch_states.append(states)
            batch_actions.append(actions)
            batch_qvals.append(q)
            if len(batch_states) == EPISODES_PER_BATCH:
                s, a, qv = torch.cat(batch_states), torch.cat(batch_actions), torch.cat(batch_qvals)
                logp = torch.log_softmax(net(s), -1).gather(1, a[:, None]).squeeze(1)
                loss = -(logp * (qv - qv.mean())).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                batch_states.clear()
                batch_actions.clear()
                batch_qvals.clear()
            tracker.step()
