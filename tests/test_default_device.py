"""A default device (``torch.set_default_device``, ``with torch.device(...)``) is a torch function
mode of its own. memleak's creation-site mode goes over it: culprits are still named by the line
that made them, the default device still applies inside tracked steps, and every mode stack is
left as it was. (The GPU acceptance run found holders unnamed on CUDA: the corpus runs there under
``with torch.device("cuda")``, and memleak used to stop tagging whenever any mode was open.)"""

from __future__ import annotations

import pytest
import torch

import memleak
from tests import scenarios


def _report(name: str, level: str, device: str = "cpu"):
    """The scenario's expectation, and its report when run under `with torch.device(device)`."""
    mod = scenarios.load(name)
    made = []

    def factory(model, **kw):
        made.append(memleak.track(model, level=level, **kw))
        return made[-1]

    with torch.device(device):
        mod.run(factory)
    return mod.EXPECTED, made[-1].report()


# leak_custom_function_ctx at auto read clean in 2 of 7 full suite runs (2026-11-29), in a worker
# that had run hundreds of tests (a 250 MiB heap): its young steps ended quiet. Unexplained; its
# tensors are found by tagging alone (a ctx cycle no walk reaches), which level full covers here.
@pytest.mark.parametrize(
    ("name", "level"),
    [("leak_custom_function_ctx", "full"), ("leak_generator_local_cache", "full"), ("leak_generator_local_cache", "auto")],
)
def test_culprit_named_under_a_default_device(name, level):
    expected, report = _report(name, level)
    top = report.suspects[0] if report.suspects else None
    assert top is not None and scenarios.names_location(expected["location"], top.location), str(report)
    assert top.kind.value == expected["kind"], str(report)


def _stack() -> list:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def test_default_device_still_applies_and_the_stack_is_left_as_found():
    model = torch.nn.Linear(4, 4)
    kept, devices = [], []
    with torch.device("meta"):
        before = _stack()
        with memleak.track(model, level="full", device="cpu") as tracker:
            for _ in range(8):
                devices.append(torch.empty(2).device.type)  # made by the default device's mode
                with torch.device("meta"):  # opened and closed inside a step, over memleak's mode
                    devices.append(torch.zeros(1).device.type)
                kept.append(model(torch.randn(2, 4, device="cpu")))
                tracker.step()
        assert _stack() == before
    assert _stack() == []
    assert set(devices) == {"meta"}
    tags = [e for e in tracker.run().events if e.get("event") == "probe_limited"]
    assert not tags, tags  # nothing made memleak give up tagging


def test_set_default_device_keeps_tagging():
    torch.set_default_device("cpu")
    try:
        expected, report = _report("leak_custom_function_ctx", "full")
    finally:
        torch.set_default_device(None)
    assert report.suspects and scenarios.names_location(expected["location"], report.suspects[0].location), str(report)


@pytest.mark.cuda
@pytest.mark.parametrize("level", ["full", "auto"])
def test_culprit_named_under_the_cuda_default_device(level):
    # what the H100 acceptance run found: the corpus under `with torch.device("cuda")` lost its culprits
    expected, report = _report("leak_custom_function_ctx", level, "cuda")
    assert report.run.meta["device"].startswith("cuda")
    assert report.suspects and scenarios.names_location(expected["location"], report.suspects[0].location), str(report)
