"""The pytest plugin, run through pytester: a leaking step fails with its suspect, the fixed one passes."""
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
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_leaking_step_fails_with_the_suspect(pytester):
    result = run(pytester, STEP_TEST.format(kept="out"))
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "memory leak:" in out and "per step over 40 steps" in out
    assert "top suspects:" in out
    assert "LEAK" in out
    # the top suspect is the list that keeps every step's output (and its graph) alive
    top = next(line for line in out.splitlines() if line.startswith("1. "))
    assert "history" in top, out
    assert "fix:" in out
    assert "Traceback" not in out  # the failure text is the report, not a stack trace


def test_fixed_step_passes(pytester):
    result = run(pytester, STEP_TEST.format(kept="loss.item()"))
    result.assert_outcomes(passed=1)


def test_max_growth_tolerates_a_leak_below_the_limit(pytester):
    source = STEP_TEST.format(kept="out").replace("@pytest.mark.memleak(steps=40)",
                                              '@pytest.mark.memleak(steps=40, max_growth="1 GiB/step")')
    source = source.replace('assert report.verdict.value in ("clean", "inconclusive")', "assert report.leak")
    result = run(pytester, source)
    result.assert_outcomes(passed=1)


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


def test_memleak_out_keeps_the_run_and_report(pytester, tmp_path):
    out = tmp_path / "runs"
    result = run(pytester, STEP_TEST.format(kept="loss.item()"), f"--memleak-out={out}", "--memleak-steps=12")
    result.assert_outcomes(passed=1)
    (folder,) = list(out.iterdir())
    assert "test_train_step" in folder.name
    names = {p.name for p in folder.iterdir()}
    assert {"run.jsonl", "report.txt", "findings.json"} <= names


def test_plugin_imports_without_torch():
    code = ("import sys; import memleak.integrations.pytest_plugin; "
            "bad = [m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plugin_is_registered_by_the_entry_point(pytester):
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.memleak(steps=*"])
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--memleak-out*"])


@pytest.mark.cuda
def test_leaking_cuda_step_fails(pytester):
    source = STEP_TEST.format(kept="out").replace(
        "opt = torch.optim", "model = model.cuda()\n    opt = torch.optim").replace(
        "torch.randn(128, 128)", "torch.randn(128, 128, device='cuda')")
    result = run(pytester, source)
    result.assert_outcomes(failed=1)
    assert "memory leak:" in result.stdout.str()
