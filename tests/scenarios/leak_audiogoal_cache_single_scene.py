"""An audio-visual navigation agent (SoundSpaces-style) trained in one scene: the simulator renders
the "audiogoal", the binaural waveform the agent hears this second, by convolving the current second
of the source sound with the room impulse response for the agent's grid node and heading, and
memoizes it in ``self._audiogoal_cache[join_index]``, keyed by (receiver node, heading, source node,
second of the sound). The cache is cleared only when the simulator loads a different scene; a run
that trains in a single scene never does, and with the second of the sound in the key nearly every
env step is a miss, so one 2-channel waveform (32 KiB) is added per env step for good. The policy
sees the log-magnitude spectrogram of the audiogoal.

Real case: facebookresearch/sound-spaces https://github.com/facebookresearch/sound-spaces/issues/18
("``self._audiogoal_cache`` is increasing all the time"; the maintainer: "Cache is used to speed up the
computation by saving the computed waveforms at the cost of memory usage. And it resets every time
the scene environment changes").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_audiogoal_cache", "top": 1}

SR, GRID, HEADINGS, SOUND_SECONDS, RIR_LEN = 4000, 20, 4, 30, 257


class AudioNavSim:
    def __init__(self, g):
        self.g = g
        self.scene = "apartment_0"
        self.source_sound = torch.randn(SOUND_SECONDS * SR, generator=g) * 0.1
        self.source_node = (15, 4)
        self.node = [2, 2]
        self.heading = 0
        self.episode_step_count = 0
        self._audiogoal_cache = {}

    def reconfigure(self, scene):
        if scene != self.scene:  # the only place the cache is cleared
            self.scene = scene
            self._audiogoal_cache = {}

    def _rir(self, node, heading):
        gen = torch.Generator().manual_seed(hash((node, heading, self.source_node)) % (2 ** 31))
        decay = torch.exp(-torch.arange(RIR_LEN, dtype=torch.float32) / 40.0)
        return torch.randn(2, 1, RIR_LEN, generator=gen) * decay

    def _compute_audiogoal(self):
        second = self.episode_step_count % SOUND_SECONDS
        join_index = (tuple(self.node), self.heading, self.source_node, second)
        if join_index not in self._audiogoal_cache:  # the leak in a single-scene run
            segment = self.source_sound[second * SR:(second + 1) * SR]
            rir = self._rir(tuple(self.node), self.heading)
            wave = nn.functional.conv1d(segment.view(1, 1, -1), rir, padding=RIR_LEN // 2)[0]
            self._audiogoal_cache[join_index] = wave
        return self._audiogoal_cache[join_index]

    def step(self, action):
        self.episode_step_count += 1
        if action == 0:
            dx, dy = [(1, 0), (0, 1), (-1, 0), (0, -1)][self.heading]
            self.node = [min(max(self.node[0] + dx, 0), GRID - 1), min(max(self.node[1] + dy, 0), GRID - 1)]
        elif action == 1:
            self.heading = (self.heading + 1) % HEADINGS
        elif action == 2:
            self.heading = (self.heading - 1) % HEADINGS
        dist = abs(self.node[0] - self.source_node[0]) + abs(self.node[1] - self.source_node[1])
        done = dist == 0 or self.episode_step_count >= 500
        if done:
            self.node, self.heading, self.episode_step_count = [2, 2], 0, 0
        return self.observe(), -0.01 * dist, done

    def observe(self):
        wave = self._compute_audiogoal()
        spec = torch.stft(wave, n_fft=256, hop_length=128, window=torch.hann_window(256), return_complex=True)
        return torch.log1p(spec.abs())


class AudioPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2, 8, 5, stride=4), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.pi = nn.Linear(256, 3)
        self.v = nn.Linear(256, 1)

    def forward(self, spec):
        h = self.conv(spec[None])
        return self.pi(h)[0], self.v(h)[0, 0]


def run(tracker_factory, steps=30):
    g = seed(18)
    sim = AudioNavSim(g)
    model = AudioPolicy()
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    obs = sim.observe()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            sim.reconfigure("apartment_0")  # same scene every rollout
            log_probs, values, rewards = [], [], []
            for _ in range(6):
                logits, value = model(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                obs, reward, done = sim.step(int(action))
                log_probs.append(dist.log_prob(action))
                values.append(value)
                rewards.append(reward)
            ret, returns = 0.0, []
            for r in reversed(rewards):
                ret = r + 0.99 * ret
                returns.append(ret)
            returns = torch.tensor(returns[::-1])
            values, log_probs = torch.stack(values), torch.stack(log_probs)
            adv = returns - values
            loss = -(log_probs * adv.detach()).mean() + 0.5 * adv.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
