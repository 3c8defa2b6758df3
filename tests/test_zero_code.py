"""`memleak run script.py`: an unchanged script, its iterations and model found from optimizer steps.

The leaking example runs in a subprocess, as users run it; the other command-line cases call the
command's `main()` in this process (tests/helpers.py), which also checks that `memleak run`
leaves this interpreter as it found it."""
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import memleak
from helpers import memleak_in_process
from memleak.integrations.zero_code import ZeroCodeSession, run_target

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "leaky_train.py"


def memleak_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "memleak", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_memleak_run_finds_the_leak_in_an_unchanged_script_and_check_exits_1(tmp_path):
    out = tmp_path / "run"
    result = memleak_cli("run", "--out", out, "--check", EXAMPLE, "--steps", 40)
    assert result.returncode == 1, result.stderr  # --check: a leak is exit status 1
    stdout = result.stdout
    assert "trained 40 steps" in stdout  # the script ran, with its own arguments
    assert "tracked 39 iterations of" in stdout and "model Sequential" in stdout
    assert "verdict: LEAK" in stdout
    top = stdout.split("suspects, most likely first:")[1]
    assert "kept_logits" in top.split("\n\n")[0], stdout
    assert (out / "run.jsonl").is_file() and (out / "report.txt").is_file()
    run = memleak.load(out)
    assert run.meta["argv"] == [str(EXAMPLE), "--steps", "40"]
    assert run.meta["model"] == "Sequential"


def test_memleak_run_on_the_fixed_script_is_clean(tmp_path):
    result = memleak_in_process("run", "--out", tmp_path / "run", "--check", EXAMPLE, "--steps", 40, "--fixed")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: LEAK" not in result.stdout


def test_missing_script_is_a_one_line_error(tmp_path):
    result = memleak_in_process("run", tmp_path / "nope.py")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("memleak: error: ") and "no such script" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- in-process, on small scripts

def write(tmp_path, body: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def run_in_process(tmp_path, body, *args, level="counters"):
    session = ZeroCodeSession(tmp_path / "out", level=level).install()
    try:
        status, failure = run_target(str(write(tmp_path, body)), list(args))
    finally:
        session.close()
    return session, status, failure


def global_hooks():
    import torch.nn.modules.module as m
    import torch.optim.optimizer as o
    return len(o._global_optimizer_post_hooks), len(m._global_forward_pre_hooks), len(m._global_forward_hooks)


def test_script_sees_main_and_its_argv(tmp_path):
    before = global_hooks()
    session, status, failure = run_in_process(tmp_path, """
        import sys, torch
        assert __name__ == "__main__"
        assert sys.argv[1:] == ["--lr", "0.1"], sys.argv
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    """, "--lr", "0.1")
    assert (status, failure) == (0, None)
    assert session.steps == 4 and session.model_name == "Linear"
    assert global_hooks() == before  # every global hook removed
    assert not session.tracker.active


def test_the_model_is_the_top_level_module_that_owns_the_parameters(tmp_path):
    session, status, _ = run_in_process(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 4)
            def forward(self, x):
                return self.b(self.a(x))

        frozen = nn.Linear(4, 4).requires_grad_(False)   # called first, owns no trained parameter
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            net(frozen(torch.randn(2, 4))).sum().backward()
            opt.step()
    """)
    assert status == 0 and session.model_name == "Net"


def test_the_model_is_the_module_that_owns_the_one_called_where_only_a_submodule_is_called(tmp_path):
    # Lightning's order: training_step calls self.body(x), never the LightningModule's own forward; the
    # list kept on the LightningModule is named as its attribute, not by a path through the trainer
    session, status, _ = run_in_process(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4))
                self.step_losses = []
            def training_step(self, x):
                loss = self.body(x).pow(2).mean()
                self.step_losses.append(loss)
                return loss

        class Trainer:
            def __init__(self, net):
                self._connector = {"selector": {"model": net}}
        net = Net()
        trainer = Trainer(net)
        del net
        opt = torch.optim.SGD(trainer._connector["selector"]["model"].parameters(), lr=0.01)
        for _ in range(40):
            loss = trainer._connector["selector"]["model"].training_step(torch.randn(8, 16))
            opt.zero_grad(); loss.backward(); opt.step()
    """, level="full")
    assert status == 0 and session.model_name == "Net"
    top = session.tracker.report().suspects[0]
    assert (top.kind, top.location) == ("retained_graph", "step_losses"), str(session.tracker.report())


def test_the_owner_climbed_to_trains_nothing_with_grad_the_optimizer_does_not():
    from memleak.integrations.zero_code import _owner

    class Net(torch.nn.Module):  # a frozen part of its own is no reason to stop
        def __init__(self):
            super().__init__()
            self.body, self.frozen = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4).requires_grad_(False)

    class GAN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g, self.d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

    def ids(m):
        return {id(p) for p in m.parameters()}

    net, gan, ensemble = Net(), GAN(), torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
    assert _owner(net.body, ids(net.body)) is net
    assert _owner(gan.g, ids(gan.g)) is gan.g  # the generator's optimizer: not the pair
    assert _owner(gan.g, ids(gan)) is gan
    assert _owner(ensemble[0], ids(ensemble[0])) is ensemble[0]


def test_two_optimizers_make_one_iteration_per_round(tmp_path):
    session, status, _ = run_in_process(tmp_path, """
        import torch
        g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
        opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
        opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
        for _ in range(10):
            d(g(torch.randn(2, 4)).detach()).sum().backward(); opt_d.step()
            d(g(torch.randn(2, 4))).sum().backward(); opt_g.step()
    """)
    assert status == 0 and session.steps == 9


def test_a_gan_that_resets_its_gradients_makes_one_iteration_per_round(tmp_path):
    # DCGAN's order: the generator's backward pass also writes the discriminator's gradients, which
    # the next round resets before its backward pass; the generator's step in between says that is
    # no skipped step (it once read as one: 19 iterations for 10 rounds)
    session, status, _ = run_in_process(tmp_path, """
        import torch
        g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
        opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
        opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
        for _ in range(10):
            fake = g(torch.randn(2, 4))
            opt_d.zero_grad(); d(fake.detach()).sum().backward(); opt_d.step()
            opt_g.zero_grad(); d(fake).sum().backward(); opt_g.step()
    """)
    assert status == 0 and session.steps == 9


def test_a_new_optimizer_takes_over(tmp_path):
    session, status, _ = run_in_process(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 4)
        for phase in range(2):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(5):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
    """)
    assert status == 0 and session.steps >= 8


def test_a_script_that_raises_keeps_its_run_and_status(tmp_path, capsys):
    before = global_hooks()
    session, status, failure = run_in_process(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
        raise ValueError("script failed")
    """)
    assert status == 1 and isinstance(failure, ValueError)
    err = capsys.readouterr().err
    assert "ValueError: script failed" in err and "runpy" not in err
    assert session.steps == 5
    assert global_hooks() == before


def test_sys_exit_status_is_kept(tmp_path):
    _, status, failure = run_in_process(tmp_path, "import sys\nsys.exit(3)\n")
    assert (status, failure) == (3, None)


def test_a_script_without_optimizer_steps_says_so(tmp_path):
    script = write(tmp_path, "print('inference only')\n")
    result = memleak_in_process("run", "--out", tmp_path / "out", script)
    assert result.returncode == 2
    assert "inference only" in result.stdout
    assert "no iteration was tracked" in result.stderr and "Traceback" not in result.stderr


def test_run_as_a_module(tmp_path):
    pkg = tmp_path / "zc_pkg"  # a name no other test imports: the module stays in sys.modules
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(20):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    """))
    before = global_hooks()
    result = memleak_in_process("run", "--level", "counters", "--out", tmp_path / "out", "-m", "zc_pkg.train",
                                cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tracked 19 iterations of -m zc_pkg.train, model Linear" in result.stdout
    assert global_hooks() == before


@pytest.mark.cuda
def test_memleak_run_on_cuda(tmp_path):
    result = memleak_cli("run", "--out", tmp_path / "run", EXAMPLE, "--steps", 40)
    assert result.returncode == 0, result.stderr
    assert "verdict: LEAK" in result.stdout and "on cuda" in result.stdout
    assert torch.cuda.is_available()


def test_bad_options_fail_before_the_script_runs(tmp_path):
    script = write(tmp_path, "print('ran')\n")
    for option in (["--budget", "lots"], ["--device", "nonsense"]):
        result = memleak_in_process("run", *option, script)
        assert result.returncode == 2 and "ran" not in result.stdout
        assert result.stderr.startswith("memleak: error: ") and "Traceback" not in result.stderr


def test_a_report_that_cannot_be_written_is_still_shown(tmp_path, monkeypatch):
    import errno

    def full_disk(self, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    monkeypatch.setattr(memleak.Report, "save", full_disk)
    script = write(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(12):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    """)
    result = memleak_in_process("run", "--level", "counters", "--out", tmp_path / "out", script)
    assert result.returncode == 0, result.stderr
    assert "memleak report:" in result.stdout and "written to" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the report could not be written into" in lines[0], result.stderr
    assert "No space left on device" in lines[0]



def test_an_inference_loop_that_carries_its_graph_is_told_to_use_no_grad(tmp_path):
    """No optimizer step, no backward: iterations end at each call of the model, and a state carried
    from call to call without no_grad chains the graphs; the fix is no_grad, not detach after backward."""
    script = write(tmp_path, textwrap.dedent("""
        import torch
        from torch import nn

        class Streamer(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 64)
                self.prev = torch.zeros(8, 64)

            def forward(self, x):
                self.prev = torch.tanh(self.fc(x) + self.prev)  # carried without no_grad
                return self.prev

        model = Streamer()
        for _ in range(40):
            model(torch.randn(8, 64))
    """))
    result = memleak_in_process("run", "--out", tmp_path / "out", script)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # the report wraps its lines
    fix = text.split("fix: ", 1)[1]
    assert "no optimizer step nor backward pass" in text
    assert "never runs backward" in fix and "torch.no_grad()" in fix and "after each backward" not in fix, text


def test_a_script_with_no_module_nor_optimizer_ends_iterations_at_its_backward_passes(tmp_path):
    """Weights as plain tensors updated by hand, losses kept with their graphs: tracked from the
    second backward pass, each ending an iteration; `torch.autograd.backward` is put back after."""
    original = torch.autograd.backward
    script = write(tmp_path, textwrap.dedent("""
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)
        w1 = torch.randn(32, 64, requires_grad=True)
        w2 = torch.randn(64, 4, requires_grad=True)
        losses = []
        for i in range(60):
            x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
            loss = F.cross_entropy((x @ w1).relu() @ w2, y)
            loss.backward()
            with torch.no_grad():
                for w in (w1, w2):
                    w -= 0.01 * w.grad
                    w.grad = None
            losses.append(loss)
    """))
    result = memleak_in_process("run", "--out", tmp_path / "out", script)
    assert result.returncode == 0, result.stderr
    assert torch.autograd.backward is original
    # each step ended inside memleak's mode's own dispatch of `loss.backward()`: the mode is gone
    assert torch._C._len_torch_function_stack() == 0
    text = " ".join(result.stdout.split())
    assert "iterations end at each backward pass (no optimizer step was seen)" in text, text
    run = memleak.load(tmp_path / "out")
    assert len(run.steps) >= 55
    assert "retained_graph at losses" in text, text


def test_a_script_with_a_model_runs_its_backward_passes_unwrapped_once_tracking_starts(tmp_path):
    """The wrapper is for scripts with no model: once a model or an optimizer step starts tracking,
    `torch.autograd.backward` is torch's own again (no memleak frame in the script's tracebacks)."""
    script = write(tmp_path, textwrap.dedent("""
        import torch
        from torch import nn

        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(4):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        print("wrapped" if hasattr(torch.autograd.backward, "__wrapped__") else "torch's own")
    """))
    result = memleak_in_process("run", "--out", tmp_path / "out", script)
    assert result.returncode == 0, result.stderr
    assert "torch's own" in result.stdout, result.stdout


def test_what_the_script_s_globals_hold_outlives_the_script_until_the_run_ends(tmp_path):
    # a hand-written optimizer without no_grad after a create_graph backward chains its state; the
    # parameter-gradient cycle makes it all cyclic garbage once the script's globals go: the run's
    # last collection must not read the script's own end as garbage given back ("not a leak")
    script = write(tmp_path, """
        import torch
        from torch import nn


        class Momentum(torch.optim.Optimizer):
            def __init__(self, params):
                super().__init__(params, {"lr": 0.01})

            def step(self):
                for p in self.param_groups[0]["params"]:
                    st = self.state[p]
                    st["buf"] = st.get("buf", torch.zeros_like(p.data))
                    st["buf"].mul_(0.9).add_(p.grad)
                    p.data.add_(st["buf"].data, alpha=-0.01)


        model = nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 10))
        opt = Momentum(model.parameters())
        for step in range(80):
            loss = nn.functional.cross_entropy(model(torch.randn(64, 128)), torch.randint(0, 10, (64,)))
            opt.zero_grad()
            loss.backward(create_graph=True)
            opt.step()
    """)
    gc.collect()  # the test process's own garbage is not the script's to give back
    result = memleak_in_process("run", "--out", tmp_path / "run", script)
    assert "verdict: LEAK: retained_graph at opt.state" in result.stdout, result.stdout
    assert "cyclic garbage" not in result.stdout, result.stdout
