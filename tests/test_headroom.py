"""Headroom: the largest batch that fits, from peaks at two or more batch sizes."""
from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import memleak
from memleak.cli import main as cli_main
from memleak.detect.headroom import accumulation, fit_line, largest_batch
from memleak.planning import headroom
from memleak.probes.peak import measure_peak

GIB, MIB = 2**30, 2**20


def _deep_narrow_step(device="cpu"):
    """A training step whose peak is dominated by activations (many narrow layers, big batches)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(16) for m in (nn.Linear(64, 64), nn.ReLU())], nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(bs: int) -> None:
        x = torch.randn(bs, 64, device=device)
        y = torch.randint(0, 10, (bs,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _validate(device: str, sizes: tuple[int, ...], third: int) -> float:
    step = _deep_narrow_step(device)
    result = memleak.headroom(step, batch_sizes=sizes, capacity=64 * GIB, device=device, target_batch=4 * third)
    print(result)
    measured = measure_peak(step, third, torch.device(device))
    predicted = result.predict(third)
    err = abs(predicted - measured) / measured
    growth_err = abs(predicted - measured) / (measured - result.intercept)
    print(f"{device}: batch {third}: predicted {predicted / MIB:.1f} MiB, measured {measured / MIB:.1f} MiB: "
          f"error {err:.2%} of the peak, {growth_err:.2%} of the batch-dependent part")
    assert result.measured and result.slope > 0
    return err


def test_prediction_matches_a_peak_measured_at_a_third_batch_size_on_cpu():
    assert _validate("cpu", (1024, 2048, 4096), 8192) < 0.10


@pytest.mark.cuda
def test_prediction_matches_a_peak_measured_at_a_third_batch_size_on_cuda():
    assert _validate("cuda", (4096, 8192, 16384), 65536) < 0.10


def test_measuring_leaves_no_mode_or_thread_behind():
    threads = threading.active_count()
    step = _deep_narrow_step()
    measure_peak(step, 256, torch.device("cpu"))
    assert torch._C._len_torch_dispatch_stack() == 0
    assert threading.active_count() == threads


def test_given_peaks_give_the_fit_the_largest_batch_and_accumulation():
    peaks = {8: GIB + 8 * 64 * MIB, 16: GIB + 16 * 64 * MIB}
    r = headroom(peaks=peaks, capacity="80 GiB", margin=0.1, target_batch=4096)
    assert r.intercept == pytest.approx(GIB) and r.slope == pytest.approx(64 * MIB)
    expected = int((80 * GIB / 1.1 - GIB) // (64 * MIB))
    assert r.max_batch == expected == 1147
    assert r.predict(r.max_batch) * 1.1 <= 80 * GIB < r.predict(r.max_batch + 1) * 1.1
    assert (r.accumulation_steps, r.micro_batch) == (4, 1024)
    assert r.effective_batch == 4096
    text = str(r)
    assert "largest batch that fits: 1147" in text and "4 gradient-accumulation steps of 1024" in text
    assert "1.0 GiB + 64.0 MiB x batch" in text


def test_sizes_as_text_and_target_within_reach():
    r = headroom(peaks={"8": "1.2GiB", 16: "2.1GiB"}, capacity="80GiB", target_batch=256)
    assert r.accumulation_steps == 1 and r.micro_batch == 256
    assert "fits in one step" in str(r)


def test_the_fit_shrugs_off_one_bad_point():
    peaks = {8: 100 + 8 * 10, 16: 100 + 16 * 10, 32: 100 + 32 * 10, 64: 5000}
    a, b = fit_line(peaks)
    assert (a, b) == pytest.approx((100, 10))


def test_flat_peaks_and_nothing_fits():
    flat = headroom(peaks={8: GIB, 16: GIB}, capacity="80GiB")
    assert flat.max_batch is None and "does not grow" in str(flat)
    none = headroom(peaks={8: 79 * GIB, 16: 79.5 * GIB}, capacity="80GiB", target_batch=64)
    assert none.max_batch == 0 and none.accumulation_steps is None and "no batch fits" in str(none)


def test_accumulation_prefers_an_exact_divisor():
    assert accumulation(256, 100) == (4, 64)
    assert accumulation(97, 10) == (10, 10)  # 97 is prime: ceil covers it
    assert accumulation(30, 30) == (1, 30)


@pytest.mark.parametrize("kwargs, match", [
    (dict(peaks={8: GIB}), "two or more"),
    (dict(peaks={8: GIB, 16: 2 * GIB}, step_fn=lambda bs: None), "either step_fn"),
    (dict(), "either step_fn"),
    (dict(peaks={0: GIB, 16: 2 * GIB}), "positive integer"),
    (dict(peaks={8.5: GIB, 16: 2 * GIB}), "positive integer"),
    (dict(peaks={8: "lots", 16: 2 * GIB}), "cannot read 'lots' as a size"),
    (dict(peaks={8: GIB, 16: 2 * GIB}, margin=-1), "margin"),
    (dict(peaks={8: GIB, 16: 2 * GIB}, target_batch=0), "target_batch"),
])
def test_bad_arguments_say_what_is_wrong(kwargs, match):
    kwargs.setdefault("capacity", "80GiB")
    step_fn = kwargs.pop("step_fn", None)
    with pytest.raises(memleak.UsageError, match=match):
        headroom(step_fn, **kwargs)


def test_memleak_headroom_is_the_function_even_once_the_cli_is_imported():
    import memleak.cli.headroom  # noqa: F401 (what `memleak headroom` does)
    r = memleak.headroom(peaks={8: GIB, 16: 2 * GIB}, capacity="80GiB")
    assert r.max_batch == headroom(peaks={8: GIB, 16: 2 * GIB}, capacity="80GiB").max_batch
    assert r.slope == GIB / 8 and r.intercept == 0


def test_cli(capsys):
    assert cli_main(["headroom", "--peaks", "8=1.2GiB,16=2.1GiB", "--capacity", "80GiB", "--target-batch", "256"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "largest batch that fits: 643" in out and "target batch 256" in out
    assert cli_main(["headroom", "--peaks", "8=1.2GiB,16=2.1GiB", "--capacity", "80GiB", "--json"]) == 0
    assert '"max_batch": 643' in capsys.readouterr().out
    assert cli_main(["headroom", "--peaks", "8:1.2GiB", "--capacity", "80GiB"]) == 2
    assert "BATCH=SIZE" in capsys.readouterr().err


class _Device:
    """A step whose real memory per sample is `real` bytes (the fit saw less), on a fake CUDA device."""

    def __init__(self, monkeypatch, intercept: float, real: float, capacity: float):
        self.intercept, self.real, self.capacity, self.tried = intercept, real, capacity, []
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def step(self, bs: int) -> None:
        self.tried.append(bs)
        if self.intercept + self.real * bs > self.capacity:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_confirm_bisects_real_steps_when_the_fitted_limit_runs_out_of_memory(monkeypatch):
    from memleak.planning import confirm_limit

    # what the H100 run showed: 94 KiB a sample fitted at small batches, about 134 KiB at the limit
    cap, a = 84.2e9, 345e6
    dev = _Device(monkeypatch, a, 134e3, cap)
    fit = headroom(peaks={1024: a + 94e3 * 1024, 4096: a + 94e3 * 4096}, capacity=cap, margin=0.1)
    real = int((cap - a) / 134e3)
    got = confirm_limit(dev.step, fit, torch.device("cuda", 0))
    assert dev.tried[0] == largest_batch(fit.intercept, fit.slope, cap, 0.0) > real  # the fitted limit first
    assert got.oom_batch is not None and got.confirmed_batch is not None
    assert 0.99 * real <= got.confirmed_batch <= real < got.oom_batch
    assert got.confirm_tries == len(dev.tried) <= 12
    assert got.max_batch is not None and got.max_batch < fit.max_batch
    assert a + 134e3 * got.max_batch * 1.0 <= cap / 1.1 * 1.01  # the margin kept, on the real cost
    assert "ran out of memory" in str(got) and str(got.confirmed_batch) in str(got)
    assert got.to_dict()["confirmed_batch"] == got.confirmed_batch


def test_confirm_keeps_a_fit_whose_limit_runs(monkeypatch):
    from memleak.planning import confirm_limit

    dev = _Device(monkeypatch, 1e9, 100e3, 80e9)
    fit = headroom(peaks={64: 1e9 + 100e3 * 64, 128: 1e9 + 100e3 * 128}, capacity=80e9)
    got = confirm_limit(dev.step, fit, torch.device("cuda", 0))
    assert len(dev.tried) == 1 and got.confirmed_batch == dev.tried[0] and got.oom_batch is None
    assert got.max_batch == fit.max_batch and "one step at batch" in str(got)


def test_confirm_lets_other_errors_through_and_needs_cuda(monkeypatch):
    from memleak.planning import confirm_limit

    _Device(monkeypatch, 0, 1, 1)
    fit = headroom(peaks={1: 10, 2: 20}, capacity=1000)

    def broken(bs):
        raise ValueError("a bug in the step")

    with pytest.raises(ValueError, match="a bug in the step"):
        confirm_limit(broken, fit, torch.device("cuda", 0))
    with pytest.raises(memleak.UsageError, match="confirm=True .* CUDA"):
        headroom(lambda bs: None, batch_sizes=(1, 2), device="cpu", confirm=True)
    with pytest.raises(memleak.UsageError, match="needs step_fn"):
        headroom(peaks={1: 10, 2: 20}, capacity=1000, confirm=True)
