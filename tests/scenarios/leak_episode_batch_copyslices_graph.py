"""A pymarl-style multi-agent learner: the runner fills an ``EpisodeBatch`` of preallocated tensors
step by step, and ``ReplayBuffer.insert_episode_batch`` copies each finished episode into the
buffer's own preallocated tensors with an indexed assignment (``target[k][slices] = v``). The
behaviour policy's action probabilities ``pi`` (kept for truncated importance weights) are written
without ``detach()``. An indexed assignment of a tensor that requires grad into a plain buffer turns
the buffer into a non-leaf with a ``CopySlices`` node that keeps the source's graph, and each later
insertion stacks another ``CopySlices`` on top: the buffer is fixed-size and overwritten as a ring,
its bytes never change, yet every episode's recurrent-agent graph (all its saved activations) stays
reachable from ``buffer.transition_data["pi"]``. The learner reads ``pi`` only under
``torch.no_grad()``, so nothing ever frees the chain.

Real case: oxwhirl/pymarl https://github.com/oxwhirl/pymarl/pull/73 ("In EpisodeRunner, the
``actions`` should either be detached from the computation graph or be converted into a numpy array
before being stored into the replay buffer ... the entire computation graph for generating the action
isn't released ... The CPU memory will grow linearly through time"); pymarl's ``EpisodeBatch.update``
stores by indexed assignment into preallocated tensors, as here.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "transition_data", "top": 1}

N_AGENTS, OBS, N_ACTIONS, T = 3, 24, 6, 16


class RNNAgent(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(OBS, hidden)
        self.rnn = nn.GRUCell(hidden, hidden)
        self.fc2 = nn.Linear(hidden, N_ACTIONS)
        self.hidden = hidden

    def init_hidden(self, batch):
        return torch.zeros(batch * N_AGENTS, self.hidden)

    def forward(self, obs, h):
        h = self.rnn(torch.relu(self.fc1(obs.reshape(-1, OBS))), h)
        return self.fc2(h).reshape(-1, N_AGENTS, N_ACTIONS), h


class EpisodeBatch:
    scheme = {"obs": ((N_AGENTS, OBS), torch.float32), "actions": ((N_AGENTS,), torch.long),
              "pi": ((N_AGENTS, N_ACTIONS), torch.float32), "reward": ((), torch.float32)}

    def __init__(self, batch_size, max_t):
        self.batch_size, self.max_t = batch_size, max_t
        self.transition_data = {k: torch.zeros((batch_size, max_t) + shape, dtype=dt)
                                for k, (shape, dt) in self.scheme.items()}

    def update(self, data, bs=slice(None), ts=slice(None)):
        for k, v in data.items():
            target = self.transition_data[k]
            target[bs, ts] = v.view_as(target[bs, ts])  # the leak for "pi": v still has its graph


class ReplayBuffer(EpisodeBatch):
    def __init__(self, capacity, max_t):
        super().__init__(capacity, max_t)
        self.index, self.filled = 0, 0

    def insert_episode_batch(self, ep):
        sl = slice(self.index, self.index + ep.batch_size)
        self.update(ep.transition_data, bs=sl)
        self.index = (self.index + ep.batch_size) % self.batch_size
        self.filled = min(self.filled + ep.batch_size, self.batch_size)

    def sample(self, n, g):
        idx = torch.randint(0, self.filled, (n,), generator=g)
        return {k: v[idx] for k, v in self.transition_data.items()}


def run(tracker_factory, steps=30):
    g = seed(73)
    agent = RNNAgent()
    target = RNNAgent()
    target.load_state_dict(agent.state_dict())
    opt = torch.optim.RMSprop(agent.parameters(), lr=5e-4)
    buffer = ReplayBuffer(capacity=12, max_t=T)
    with tracker_factory(agent, optimizer=opt) as tracker:
        for step in range(steps):
            # runner: one episode, acting with the recurrent agent (epsilon-greedy over softmax)
            episode = EpisodeBatch(1, T)
            h = agent.init_hidden(1)
            for t in range(T):
                obs = torch.randn(1, N_AGENTS, OBS, generator=g)
                q, h = agent(obs, h)
                pi = torch.softmax(q, -1)
                actions = pi.argmax(-1)
                episode.update({"obs": obs, "actions": actions, "pi": pi,
                                "reward": torch.randn(1, generator=g)}, ts=t)
            buffer.insert_episode_batch(episode)
            # learner: Q(lambda)-style update with truncated importance weights
            if buffer.filled >= 4:
                batch = buffer.sample(4, g)
                h, ht = agent.init_hidden(4), target.init_hidden(4)
                qs, tqs = [], []
                for t in range(T):
                    q, h = agent(batch["obs"][:, t], h)
                    with torch.no_grad():
                        tq, ht = target(batch["obs"][:, t], ht)
                    qs.append(q)
                    tqs.append(tq)
                qs, tqs = torch.stack(qs, 1), torch.stack(tqs, 1)
                chosen = qs.gather(-1, batch["actions"][..., None]).squeeze(-1)
                with torch.no_grad():
                    pi_now = torch.softmax(qs, -1).gather(-1, batch["actions"][..., None]).squeeze(-1)
                    pi_old = batch["pi"].gather(-1, batch["actions"][..., None]).squeeze(-1)
                    rho = (pi_now / pi_old.clamp(min=1e-6)).clamp(max=1.0)
                    y = batch["reward"][:, :-1, None] + 0.99 * tqs[:, 1:].max(-1).values
                loss = (rho[:, :-1] * (chosen[:, :-1] - y).pow(2)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if step % 5 == 4:
                target.load_state_dict(agent.state_dict())
            tracker.step()
