"""What the interpreter keeps for the whole process names the holder: callbacks registered with
atexit (counted each step), signal handlers and the registries of warnings shown (walked)."""
import atexit
import logging
import signal
import warnings
import weakref

import pytest
import torch
from torch import nn

import memleak
from tests.helpers import make_model


def _train(tracker, model, opt, steps, after_step):
    for step in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        after_step(step, model)
        tracker.step()


def _report(after_step, steps=30):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        _train(tracker, model, opt, steps, after_step)
    return tracker.report()


def _save(state, step):
    pass


def test_tensors_given_to_atexit_each_step_are_held_by_the_atexit_callbacks():
    def register(step, model):
        atexit.register(_save, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)

    try:
        report = _report(register)
    finally:
        atexit.unregister(_save)
    top = report.suspects[0]
    assert report.verdict.value == "leak" and top.location == "atexit callbacks", str(report)
    assert "atexit.unregister" in top.fix and any("registered with atexit" in e for e in top.evidence)
    assert report.run.steps["atexit_callbacks"].diff().dropna().ge(0).all()


class _Trial:
    """A trial's trainer that registers its own close with atexit (composer PR 1769): its model is
    made in the constructor, outside any tagged op of the user's, so only the callbacks name it."""

    def __init__(self):
        self.model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
        self.opt = torch.optim.Adam(self.model.parameters())
        atexit.register(self.close)

    def close(self):
        pass


def test_trainers_kept_by_their_atexit_close_are_named_where_nothing_else_is():
    trials = []

    def new_trial(step, model):
        if step % 3 == 0:
            trial = _Trial()
            trial.model(torch.randn(8, 64)).sum().backward()
            trial.opt.step()  # its Adam state, kept with it
            trials.append(weakref.WeakMethod(trial.close))

    try:
        report = _report(new_trial, steps=36)
    finally:
        for close in trials:
            if close() is not None:
                atexit.unregister(close())
    top = report.suspects[0]
    assert report.verdict.value == "leak" and top.location == "atexit callbacks", str(report)
    assert top.kind == "surviving_tensors" and "atexit.unregister" in top.fix
    assert any("no variable, attribute or container" in e for e in top.evidence)


def test_callbacks_registered_once_name_no_holder():
    atexit.register(_save, torch.randn(1024), -1)
    kept = []
    try:
        report = _report(lambda step, model: kept.append(torch.randn(4096)))
    finally:
        atexit.unregister(_save)
    assert report.suspects[0].location == "kept", str(report)
    assert all(s.location != "atexit callbacks" for s in report.suspects)


def test_a_chain_of_signal_handlers_is_named_by_the_handler_that_keeps_the_one_before():
    original = signal.getsignal(signal.SIGUSR1)

    def install(step, model):
        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        prev = signal.getsignal(signal.SIGUSR1)

        def on_signal(signum, frame):
            torch.save(snapshot, "/dev/null")
            if callable(prev):
                prev(signum, frame)

        signal.signal(signal.SIGUSR1, on_signal)

    try:
        report = _report(install)
    finally:
        signal.signal(signal.SIGUSR1, original)
    top = report.suspects[0]
    assert report.verdict.value == "leak" and "closure of" in top.location and "on_signal" in top.location, str(report)
    assert any("signal SIGUSR1" in e for e in top.evidence), top.evidence


class _OutlierWarning(UserWarning):
    pass


def test_warnings_with_a_new_message_each_time_are_named_by_the_registry():
    def warn(step, model):
        for i in range(200):
            # over 512 bytes: from malloc, not from pymalloc's arenas (which reuse what earlier tests freed)
            warnings.warn(f"step {step}: sample {i} is an outlier: " + "see its label " * 40, _OutlierWarning)

    globals().pop("__warningregistry__", None)
    sink = logging.getLogger("py.warnings")
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda *a, **k: None
        report = _report(warn)
    globals().pop("__warningregistry__", None)
    assert report.suspects, str(report)
    top = report.suspects[0]
    assert report.verdict.value == "leak" and top.location == f"{__name__}.__warningregistry__", str(report)
    assert top.kind.value == "python_objects"
    assert sink is logging.getLogger("py.warnings")


def test_a_metrics_dict_names_the_entry_that_keeps_graphs_among_detached_ones():
    """TRL's CPOTrainer (trl #1526): seven metrics stored per step, one without detach: the
    detached ones grow alike, but the one to fix is the one that keeps each step's graph."""
    stored = {k: [] for k in ("acc", "reward", "logps", "nll", "margin")}
    model = make_model()

    def store(step, _):
        out = model(torch.randn(16, 64))
        nll = out.logsumexp(-1).mean()
        metrics = {k: out.detach().mean() for k in ("acc", "reward", "logps", "margin")}
        metrics["nll"] = nll  # the leak: no detach
        for k, v in metrics.items():
            stored[k].append(v)
        nll.backward()  # what it saved is freed: the graph's nodes stay, with nothing else to tell it apart

    report = _report(store)
    top = report.suspects[0]
    assert top.location == "stored['nll']" and top.kind.value == "retained_graph", str(report)
    assert any("more entries of stored" in e for e in top.evidence), str(report)


@pytest.mark.parametrize("registry", [{("text", UserWarning, 3): True, "version": 4}])
def test_a_class_in_a_key_is_plain_data(registry):
    from memleak.probes.pydata import data_size

    assert data_size(registry) is not None


def test_a_module_loaded_under_a_new_name_each_step_is_named_by_sys_modules(tmp_path):
    import importlib.util
    import sys

    source = tmp_path / "weights_table.py"
    source.write_text("import torch\nTABLE = torch.randn(64, 256)\n")
    names = []

    def load(step, model):
        name = f"memleak_test_weights_{step}"
        spec = importlib.util.spec_from_file_location(name, source)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # never removed: one more module, and its table, each step
        names.append(name)
        spec.loader.exec_module(module)

    try:
        report = _report(load)
    finally:
        for name in names:
            sys.modules.pop(name, None)
    top = report.suspects[0]
    assert report.verdict.value == "leak" and top.location == "sys.modules", str(report)
    assert "del sys.modules[name]" in top.fix
