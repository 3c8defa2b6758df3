"""A streaming speech recognizer (whisper_streaming's ``OnlineASRProcessor`` pattern): each incoming
chunk of audio is appended to ``asr.audio_buffer``, the encoder re-reads the whole buffer, the
tokens two consecutive hypotheses agree on are committed, and the buffer is trimmed only at the end
of a committed segment, which needs a pause (a silent frame). A speaker who never pauses (continuous
speech, a noisy room whose level never drops below the silence threshold) never ends a segment: the
buffer is never trimmed and grows by every chunk, for the whole session. Recognition runs under
``torch.inference_mode()``: no graph, one growing tensor, replaced by a larger one at every chunk.

Real case: sanskarpan/orpheus https://github.com/sanskarpan/orpheus/issues/529 ("buffer grows
unbounded when LocalAgreement never confirms": "_committed stays 0" and that "gates out the
max_buffer trim → unbounded growth"), and QuentinFuxa/WhisperLiveKit
https://github.com/QuentinFuxa/WhisperLiveKit/issues/129 ("After there are long pauses in speech,
the audio buffer becomes too large": "Audio buffer too large: 10.40s").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "audio_buffer", "top": 1}
FRAME = 400  # 25 ms at 16 kHz
CHUNK = 8000  # 0.5 s a step
SILENCE = 1e-4  # mean energy under which a frame is a pause


class FrameEncoder(nn.Module):
    def __init__(self, frame=FRAME, d=64, vocab=32):
        super().__init__()
        self.proj = nn.Linear(frame, d)
        self.ctx = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, frames):
        h = torch.tanh(self.proj(frames))
        h = h + self.ctx(h.mean(0, keepdim=True))  # each frame sees the whole buffer
        return self.head(h)


class OnlineASRProcessor:
    def __init__(self, model):
        self.model = model
        self.audio_buffer = torch.zeros(0)
        self.buffer_start = 0  # frames trimmed so far
        self.committed = []  # (absolute frame, token)
        self.prev = []

    def insert_audio_chunk(self, chunk):
        self.audio_buffer = torch.cat([self.audio_buffer, chunk])

    def process_iter(self):
        n = self.audio_buffer.numel() // FRAME
        frames = self.audio_buffer[: n * FRAME].view(n, FRAME)
        with torch.inference_mode():
            hyp = self.model(frames).argmax(-1).tolist()
        done = max(0, (self.committed[-1][0] + 1 - self.buffer_start) if self.committed else 0)
        agree = done
        while agree < min(len(hyp), len(self.prev)) and hyp[agree] == self.prev[agree]:
            agree += 1
        self.committed += [(self.buffer_start + i, hyp[i]) for i in range(done, agree)]
        self.prev = hyp
        # trim at the last pause inside the committed part: a segment has ended there
        energy = frames[:agree].pow(2).mean(-1)
        pauses = (energy < SILENCE).nonzero().flatten()
        if len(pauses):  # the leak: with no pause the buffer is never cut, however long it gets
            cut = int(pauses[-1]) + 1
            self.audio_buffer = self.audio_buffer[cut * FRAME:].clone()
            self.prev = self.prev[cut:]
            self.buffer_start += cut
        self.committed = self.committed[-256:]


def run(tracker_factory, steps=30):
    g = seed(529)
    model = FrameEncoder().eval()
    asr = OnlineASRProcessor(model)
    t = torch.arange(CHUNK) / 16000.0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            # continuous speech over room noise: never below the silence threshold
            voice = 0.3 * torch.sin(2 * torch.pi * (180 + 40 * step % 7) * t)
            chunk = voice + 0.05 * torch.randn(CHUNK, generator=g)
            asr.insert_audio_chunk(chunk)
            asr.process_iter()
            tracker.step()
