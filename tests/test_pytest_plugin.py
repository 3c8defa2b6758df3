"""The pytest plugin, run through pytester: a leaking step fails with its suspect, the fixed one passes.

The inner pytest sessions run in this process (each new interpreter would pay seconds to import
torch); the plugin is still found through its entry point, as a fresh session loads them."""
import os
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

STEP_TEST = '''
import pytest
import torch
from torch import nn


@pytest.mark.memleak(steps=40)
def test_train_step(memleak_check):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []

    def step():
        out = model(torch.randn(128, 128))
        loss = out.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append({kept})

    report = memleak_check(step, model=model, optimizer=opt)
    assert report.verdict.value in ("clean", "inconclusive")
'''


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the subprocesses: no thread spinning on a busy CI machine


def run(pytester, source, *args):
    pytester.makepyfile(test_step=source)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def _three_steps() -> str:
    """One test file with a leaking step, the fixed step and a leak below its max_growth."""
    leaking = STEP_TEST.format(kept="out").replace("def test_train_step(", "def test_leaking(")
    fixed = STEP_TEST.format(kept="loss.item()").replace("def test_train_step(", "def test_fixed(")
    tolerated = (
        STEP_TEST.format(kept="out")
        .replace("def test_train_step(", "def test_tolerated(")
        .replace("@pytest.mark.memleak(steps=40)", '@pytest.mark.memleak(steps=40, max_growth="1 GiB/step")')
        .replace('assert report.verdict.value in ("clean", "inconclusive")', "assert report.leak")
    )
    return leaking + fixed + tolerated


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """The three steps in one inner pytest session, shared by the tests that read its output."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "test_steps.py").write_text(_three_steps())
    out = folder / "runs"
    return _pytest_in_process(folder, "-p", "no:cacheprovider", "-rA", f"--memleak-out={out}", "test_steps.py"), out


def _pytest_in_process(folder, *args) -> str:
    """What `pytest ARGS` run in `folder` prints, from a session in this process (pytester's
    in-process run, which a module-scoped fixture cannot use): the test module it imports is
    forgotten afterwards, and the working directory restored. Without pytest's unraisable-exception
    plugin, as pytester's own in-process runs (its cleanup collects garbage five times, over a
    second in a process that has imported torch)."""
    import contextlib
    import io

    modules, here, printed = set(sys.modules), os.getcwd(), io.StringIO()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(printed):
            pytest.main(["-p", "no:unraisableexception", *args])
    finally:
        os.chdir(here)
        for name in set(sys.modules) - modules:
            if name == "test_steps" or name.startswith("test_steps."):
                del sys.modules[name]
    return printed.getvalue()


def _section(out: str, test: str) -> str:
    """The failure text pytest printed for `test`."""
    start = out.index(f"_ {test} _")
    end = out.find("\n___", start + 1)
    return out[start:] if end < 0 else out[start:end]


def test_leaking_step_fails_with_the_suspect(three_steps):
    out, _ = three_steps
    assert "FAILED test_steps.py::test_leaking" in out, out
    text = _section(out, "test_leaking")
    assert "memory leak:" in text and "per step over 40 steps" in text
    assert "top suspects:" in text
    assert "LEAK" in text
    # the top suspect is the list that keeps every step's output (and its graph) alive
    top = next(line for line in text.splitlines() if line.startswith("1. "))
    assert "history" in top, text
    assert "fix:" in text
    assert "Traceback" not in text  # the failure text is the report, not a stack trace


def test_fixed_step_passes(three_steps):
    out, _ = three_steps
    assert "PASSED test_steps.py::test_fixed" in out, out


def test_max_growth_tolerates_a_leak_below_the_limit(three_steps):
    out, _ = three_steps
    assert "PASSED test_steps.py::test_tolerated" in out, out


def test_marked_test_that_never_calls_the_fixture_errors(pytester):
    result = run(pytester, '''
import pytest

@pytest.mark.memleak(steps=5)
def test_forgot():
    pass
''')
    result.assert_outcomes(passed=1, errors=1)
    assert "never called memleak_check" in result.stdout.str()


def test_bad_max_growth_is_a_usage_error(pytester):
    result = run(pytester, '''
import pytest

@pytest.mark.memleak(max_growth="lots")
def test_bad(memleak_check):
    memleak_check(lambda: None)
''')
    result.assert_outcomes(failed=1)
    assert "cannot read 'lots' as a size" in result.stdout.str()


def test_memleak_out_keeps_the_run_and_report(three_steps):
    _, out = three_steps
    folders = {p.name: p for p in out.iterdir()}
    for test in ("test_leaking", "test_fixed", "test_tolerated"):  # one folder per test, named by its id
        assert sum(test in name for name in folders) == 1, list(folders)
    for folder in folders.values():
        names = {p.name for p in folder.iterdir()}
        assert {"run.jsonl", "report.txt", "findings.json"} <= names, names


def test_plugin_imports_without_torch():
    code = ("import sys; import memleak.integrations.pytest_plugin; "
            "bad = [m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plugin_is_registered_by_the_entry_point(pytester):
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.memleak(steps=*"])
    result = pytester.runpytest_inprocess("--help")
    result.stdout.fnmatch_lines(["*--memleak-out*"])


@pytest.mark.cuda
def test_leaking_cuda_step_fails(pytester):
    source = STEP_TEST.format(kept="out").replace(
        "opt = torch.optim", "model = model.cuda()\n    opt = torch.optim").replace(
        "torch.randn(128, 128)", "torch.randn(128, 128, device='cuda')")
    result = run(pytester, source)
    result.assert_outcomes(failed=1)
    assert "memory leak:" in result.stdout.str()
