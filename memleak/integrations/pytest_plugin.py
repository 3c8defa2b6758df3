"""pytest plugin (entry point ``pytest11``): fail a test whose training step leaks memory.

A test asks for the ``memleak_check`` fixture and hands it one training step;
the fixture runs the step ``steps`` times under a tracker, analyses the run,
and fails the test when memory leaks, with the top suspects as the failure
text::

    @pytest.mark.memleak(steps=40, max_growth="1 MiB/step")
    def test_train_step_does_not_leak(memleak_check):
        model = nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        history = []

        def step():
            loss = model(torch.randn(32, 64)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(loss.item())    # history.append(loss) would fail the test

        memleak_check(step, model=model, optimizer=opt)

The marker is optional: it sets the defaults of every ``memleak_check`` call in
the test (``steps``, ``max_growth``, ``level``, ``device``). It works on CPU,
so plain CI catches tensor leaks, and on CUDA (the device is the model's).

Command-line options: ``--memleak-out DIR`` keeps each checked test's run and
report in ``DIR/<test id>/``; ``--memleak-steps N`` overrides the default step
count.

This module imports only pytest: it is loaded in every pytest run, so torch
and the rest of memleak are imported when a test first uses the fixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MARKER = "memleak"
#: Steps a check runs when neither the call, the marker nor --memleak-steps says.
DEFAULT_STEPS = 30
#: Suspects shown in a failure message.
SHOWN_SUSPECTS = 3

_MARKER_KEYS = ("steps", "max_growth", "level", "device", "warmup")
_CALL_FAILED = pytest.StashKey[bool]()


class MemleakCheck:
    """What the ``memleak_check`` fixture yields: call it with a step function.

    ``check(step, model=None, optimizer=None, steps=None, max_growth=None,
    level=None, device=None, warmup=None)`` calls ``step()`` ``warmup`` times
    untracked (default 0), then ``steps`` times under ``memleak.track``, one
    iteration per call, and returns the `memleak.Report`. It fails the test
    (``pytest.fail``) when the verdict is "leak" and memory grows faster than
    ``max_growth`` (bytes per step, or a string such as ``"1 MiB/step"``;
    default 0: any confirmed leak fails). Arguments left out come from the
    test's ``@pytest.mark.memleak(...)``, then from the command line.
    """

    def __init__(self, defaults: dict[str, Any], out: Path | None, nodeid: str):
        self.defaults = defaults
        self.out = out
        self.nodeid = nodeid
        self.reports: list[Any] = []

    @property
    def report(self):
        """The report of the last check in this test (None before the first)."""
        return self.reports[-1] if self.reports else None

    def __call__(
        self,
        step: Callable[[], Any],
        *,
        model: Any = None,
        optimizer: Any = None,
        steps: int | None = None,
        max_growth: str | float | None = None,
        level: str | None = None,
        device: Any = None,
        warmup: int | None = None,
    ):
        import memleak
        from memleak.schema import DEFAULT_LEVEL
        from memleak.units import fmt_bytes, parse_bytes

        if not callable(step):
            raise memleak.UsageError(
                f"memleak_check takes the training step to run (a callable), not {type(step).__name__}"
            )
        opts = dict(self.defaults)
        given = {"steps": steps, "max_growth": max_growth, "level": level, "device": device, "warmup": warmup}
        opts.update({k: v for k, v in given.items() if v is not None})
        n = int(opts.get("steps") or DEFAULT_STEPS)
        if n < 2:
            raise memleak.UsageError(f"memleak_check needs at least 2 steps to see growth, not {n}")
        limit = parse_bytes(opts.get("max_growth") or 0)
        out = None
        if self.out is not None:
            out = self.out / (f"{len(self.reports)}" if self.reports else ".")
        for _ in range(int(opts.get("warmup") or 0)):
            step()
        tracker = memleak.track(
            model, optimizer=optimizer, level=opts.get("level") or DEFAULT_LEVEL, device=opts.get("device"), out=out
        )
        with tracker:
            for _ in range(n):
                step()
                tracker.step()
        report = tracker.report()
        self.reports.append(report)
        if out is not None:
            report.save(out)
        rate = leak_rate(report)
        if report.leak and rate > limit:
            limit_text = f"the limit of {fmt_bytes(limit)}/step" if limit else "no growth allowed"
            pytest.fail(failure_text(report, rate, limit_text, n, out), pytrace=False)
        return report


def leak_rate(report) -> float:
    """Bytes per step the leak costs: the growth trend's slope, else the top leaking suspect's."""
    rates = []
    growth = getattr(report, "growth", None)
    if growth is not None and getattr(growth, "leak", False) and growth.slope == growth.slope:
        rates.append(float(growth.slope))
    rates += [float(s.bytes_per_step) for s in report.suspects if s.leak and s.bytes_per_step == s.bytes_per_step]
    return max(rates, default=0.0)


def failure_text(report, rate: float, limit_text: str, steps: int, out: Path | None) -> str:
    """The failure message: the verdict, then the top suspects with evidence and fix."""
    from memleak.report.text import headline
    from memleak.units import fmt_bytes

    lines = [f"memory leak: {fmt_bytes(rate)} per step over {steps} steps ({limit_text})", headline(report)]
    shown = report.suspects[:SHOWN_SUSPECTS]
    if shown:
        lines += ["", "top suspects:"]
    for i, s in enumerate(shown, 1):
        lines.append(
            f"{i}. {s.kind.value} at {s.location}: {fmt_bytes(s.bytes_per_step, signed=True)} per step "
            f"(confidence {s.confidence:.2f})"
        )
        lines += [f"   - {e}" for e in s.evidence[:3]]
        lines.append(f"   fix: {s.fix}")
    if len(report.suspects) > len(shown):
        lines.append(f"({len(report.suspects) - len(shown)} more suspects in the full report)")
    if out is not None:
        lines.append(f"run and report saved in {out}")
    return "\n".join(lines)


# ---------------------------------------------------------------- pytest hooks


def pytest_addoption(parser):
    group = parser.getgroup("memleak", "memory leak checks (memleak)")
    group.addoption(
        "--memleak-out",
        metavar="DIR",
        default=None,
        help="keep the run and report of each memleak_check in DIR/<test id>/",
    )
    group.addoption(
        "--memleak-steps",
        metavar="N",
        type=int,
        default=None,
        help=f"steps each memleak_check runs when the test does not say (default {DEFAULT_STEPS})",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "memleak(steps=30, max_growth='1 MiB/step', level='auto', device=None, warmup=0): "
        "defaults for the memleak_check fixture, which fails the test when its step leaks memory",
    )


def pytest_collection_modifyitems(config, items):
    # A test marked memleak gets the fixture even if it forgot to ask: then it fails, saying how to use it.
    for item in items:
        if item.get_closest_marker(MARKER) is not None and "memleak_check" not in getattr(item, "fixturenames", ()):
            item.fixturenames.append("memleak_check")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        item.stash[_CALL_FAILED] = outcome.get_result().failed


def _marker_defaults(node) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    # Closest marker last, so a test's marker overrides its class's and module's.
    for marker in reversed(list(node.iter_markers(MARKER))):
        unknown = set(marker.kwargs) - set(_MARKER_KEYS)
        if unknown or len(marker.args) > 1:
            raise pytest.UsageError(
                f"{node.nodeid}: @pytest.mark.memleak takes {', '.join(_MARKER_KEYS)} "
                f"as keywords; got {marker.args!r} {sorted(unknown)!r}"
            )
        if marker.args:
            opts["steps"] = marker.args[0]
        opts.update(marker.kwargs)
    return opts


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150] or "test"


@pytest.fixture
def memleak_check(request):
    """Run a training step N times under memleak and fail the test if memory leaks.

    ``memleak_check(step, model=model, optimizer=opt)``; see `MemleakCheck`.
    """
    config = request.config
    defaults = {"steps": config.getoption("--memleak-steps")}
    defaults = {k: v for k, v in defaults.items() if v is not None}
    defaults.update(_marker_defaults(request.node))
    out_root = config.getoption("--memleak-out")
    out = Path(out_root) / _safe_name(request.node.nodeid) if out_root else None
    check = MemleakCheck(defaults, out, request.node.nodeid)
    yield check
    for report in check.reports:
        request.node.user_properties.append(("memleak_verdict", report.verdict.value))
    failed = request.node.stash.get(_CALL_FAILED, True)
    if not check.reports and not failed and request.node.get_closest_marker(MARKER) is not None:
        pytest.fail(
            f"{request.node.nodeid} is marked @pytest.mark.memleak but never called "
            "memleak_check(step, model=...): the marker only sets options; "
            "the fixture runs the step and checks it",
            pytrace=False,
        )
