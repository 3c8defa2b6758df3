"""Inference and evaluation: a loop run without gradients is said in the report, and
memleak.headroom sizes an inference step against the batch size and the sequence length."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memleak
from memleak.detect.headroom_inputs import InputHeadroom
from memleak.errors import UsageError
from memleak.schema import Kind

MiB = 1 << 20


def _no_grad_findings(report):
    return [f for f in report.findings if f.kind == Kind.NO_GRAD]


def test_a_loop_without_gradients_is_reported_as_inference():
    model = nn.Linear(64, 64)
    x = torch.randn(8, 64)
    with torch.inference_mode(), memleak.track(model, level="counters") as tracker:
        for _ in range(10):
            model(x)
            tracker.step()
    report = tracker.report()
    (f,) = _no_grad_findings(report)
    assert f.location == "the tracked loop (gradients disabled)" and f.note and not f.leak
    assert "10 of 10 steps ended with gradients disabled" in str(report)
    assert report.suspects == []


def test_evaluation_steps_inside_training_are_named():
    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 64)
    with memleak.track(model, level="counters") as tracker:
        for i in range(12):
            if i >= 9:
                with torch.no_grad():
                    model(x)
                    tracker.step()
            else:
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
                tracker.step()
    (f,) = _no_grad_findings(tracker.report())
    assert f.location == "evaluation steps (gradients disabled)"
    assert "3 of 12 steps" in f.evidence[0] and "steps 9 to 11" in f.evidence[0]


def test_a_training_loop_has_no_such_finding():
    model = nn.Linear(16, 16)
    with memleak.track(model, level="counters") as tracker:
        for _ in range(5):
            model(torch.randn(2, 16)).sum().backward()
            tracker.step()
    assert _no_grad_findings(tracker.report()) == []


def test_a_step_that_ends_at_the_optimizer_inside_a_no_grad_wrapper_is_a_training_step():
    # a wrapper whose step runs under @torch.no_grad() (timm's Lookahead) calls the base optimizer's
    # step inside it: the step ends at the base's hook with gradients off, yet it trained
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.no_grad()
    def wrapped_step():
        opt.step()

    with memleak.track(model, optimizer=opt, level="counters") as tracker:
        for _ in range(6):
            model(torch.randn(2, 16)).sum().backward()
            wrapped_step()
            opt.zero_grad()
    run = tracker.run()
    assert (run.steps["grad_enabled"] == 0).sum() >= 5  # read off at each step's end...
    assert _no_grad_findings(tracker.report()) == []  # ...but each step stepped the optimizer


class Attention(nn.Module):
    """One self-attention layer: its scores are batch x length x length, so the bytes per
    sample grow faster than the sequence length."""

    def __init__(self, d=32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


def test_headroom_of_an_inference_step_at_two_sequence_lengths():
    model = Attention().eval()

    def infer(batch_size, seq_len):
        with torch.no_grad():
            model(torch.randn(batch_size, seq_len, 32))

    result = memleak.headroom(infer, batch_sizes=(2, 4), input_sizes=(512, 1024), capacity="1 GiB", device="cpu")
    assert isinstance(result, InputHeadroom) and sorted(result.fits) == [512, 1024]
    short, long = result.fits[512], result.fits[1024]
    # scores of 1024 x 1024 floats are 4 MiB a sample; 512 x 512, 1 MiB: more than twice per sample
    assert long.slope > 2.5 * short.slope > 0
    assert short.max_batch > long.max_batch > 0
    between = result.max_batch(768)  # not measured: the model over input sizes
    assert long.max_batch < between < short.max_batch
    assert result.predict(long.max_batch, 1024) * 1.1 <= 1024 * MiB
    assert "input size 1024" in str(result) and "largest batch that fits" in str(result)


def test_headroom_by_input_size_takes_no_given_peaks():
    with pytest.raises(UsageError, match="input_sizes"):
        memleak.headroom(peaks={1: 10, 2: 20}, input_sizes=(1, 2))
