"""An A2C agent on a vectorized, GPU-style simulator (four copies that reset themselves inside the
sim, as Isaac Lab's are) wrapped in a Gymnasium-style ``RecordVideo``: while recording, every
``step()`` renders a frame and appends it to ``self.recorded_frames``; the recording stops when
``len(recorded_frames)`` passes ``video_length`` or when the episode ends. The run asks for
``video_length=0`` ("record the whole episode"), but a vectorized sim with auto-reset never hands
the wrapper an episode end (its ``terminated`` is a tensor of per-copy flags, not a Python
``True``), so the first recording never stops and every rendered frame (a uint8 RGB image) is kept
until ``close()``.

Real case: Farama-Foundation/Gymnasium https://github.com/Farama-Foundation/Gymnasium/issues/1377
("RAM usage of RecordVideo": "the RAM usage keeps increasing until the env is closed"), Isaac Lab
https://github.com/isaac-sim/IsaacLab/issues/1996 ("gym.wrappers.RecordVideo keep increasing memory
usage" when training with ``--video``), and the fix of the frames kept after recording,
https://github.com/Farama-Foundation/Gymnasium/pull/1444 ("``self.recorded_frames`` stays in memory").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "recorded_frames", "top": 1}

N_ENVS, OBS, ACTIONS, IMG = 4, 16, 4, 96


class PointMassSim:
    """Four point masses pushed around a box; each copy resets itself when it leaves the box."""

    def __init__(self, g):
        self.g = g
        self.pos = torch.zeros(N_ENVS, 2)
        self.vel = torch.zeros(N_ENVS, 2)
        self.goal = torch.rand(N_ENVS, 2, generator=g) * 2 - 1
        self._yy, self._xx = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")

    def obs(self):
        feats = torch.cat([self.pos, self.vel, self.goal, self.goal - self.pos], 1)
        return torch.cat([feats, torch.zeros(N_ENVS, OBS - feats.shape[1])], 1)

    def reset(self):
        return self.obs(), {}

    def step(self, action):
        push = torch.tensor([[1.0, 0], [-1.0, 0], [0, 1.0], [0, -1.0]])[action]
        self.vel = 0.9 * self.vel + 0.05 * push
        self.pos = self.pos + self.vel
        reward = -(self.goal - self.pos).norm(dim=1)
        terminated = self.pos.abs().max(1).values > 1
        self.pos[terminated] = 0.0  # auto-reset inside the sim
        self.vel[terminated] = 0.0
        return self.obs(), reward, terminated, torch.zeros_like(terminated), {}

    def render(self):
        # one 96x96 RGB frame tiling the first copy's mass (red) and goal (green)
        d_pos = (self._xx - self.pos[0, 0]) ** 2 + (self._yy - self.pos[0, 1]) ** 2
        d_goal = (self._xx - self.goal[0, 0]) ** 2 + (self._yy - self.goal[0, 1]) ** 2
        frame = torch.stack([(d_pos < 0.01), (d_goal < 0.01), torch.zeros_like(d_pos, dtype=torch.bool)], -1)
        return frame.to(torch.uint8) * 255


class RecordVideo:
    def __init__(self, env, step_trigger, video_length=0):
        self.env = env
        self.step_trigger = step_trigger
        self.video_length = video_length if video_length != 0 else float("inf")
        self.recorded_frames = []
        self.recording = False
        self.step_id = 0
        self.videos_written = 0

    def reset(self):
        return self.env.reset()

    def start_recording(self):
        self.recording = True
        self.recorded_frames = []

    def stop_recording(self):
        self.videos_written += 1  # the encoder would write the clip here
        self.recorded_frames = []
        self.recording = False

    def step(self, action):
        obs, rew, terminated, truncated, info = self.env.step(action)
        self.step_id += 1
        if not self.recording and self.step_trigger(self.step_id):
            self.start_recording()
        if self.recording:
            self.recorded_frames.append(self.env.render())
            if len(self.recorded_frames) > self.video_length:
                self.stop_recording()
            elif terminated is True or truncated is True:  # never for a vectorized sim
                self.stop_recording()
        return obs, rew, terminated, truncated, info


class ActorCritic(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, ACTIONS)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def run(tracker_factory, steps=30):
    g = seed(1996)
    env = RecordVideo(PointMassSim(g), step_trigger=lambda s: s % 200 == 5, video_length=0)
    model = ActorCritic()
    opt = torch.optim.Adam(model.parameters(), lr=7e-4)
    obs, _ = env.reset()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            log_probs, values, rewards, dones = [], [], [], []
            for _ in range(8):  # n-step rollout
                logits, value = model(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                obs, rew, term, trunc, _ = env.step(action)
                log_probs.append(dist.log_prob(action))
                values.append(value)
                rewards.append(rew)
                dones.append(term.float())
            with torch.no_grad():
                ret = model(obs)[1]
            returns = []
            for r, d in zip(reversed(rewards), reversed(dones)):
                ret = r + 0.99 * ret * (1 - d)
                returns.append(ret)
            returns = torch.stack(returns[::-1])
            values, log_probs = torch.stack(values), torch.stack(log_probs)
            adv = returns - values
            loss = -(log_probs * adv.detach()).mean() + 0.5 * adv.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
