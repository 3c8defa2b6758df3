"""Wrong arguments and odd paths on the command line: one line naming what is wrong, a non-zero exit."""
import os
from pathlib import Path

import pytest

import snapshot_factory as sf
from memleak.cli import main
from memleak.report import Report
from test_cli import EXAMPLE_RUN, assert_one_error_line, memleak


def run_main(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse exits on a usage error
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("steps", ["0", "-5", "ten"])
def test_demo_refuses_steps_that_are_not_positive(capsys, tmp_path, steps):
    code, _, err = run_main(capsys, "demo", "--steps", steps, "--out", tmp_path / "unused")
    assert code == 2
    assert "argument --steps" in err and "Traceback" not in err
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize(("device", "problem"), [("tpu", "not a device torch knows"), ("cuda:7", "cuda:7")])
def test_demo_on_a_device_this_machine_lacks(capsys, tmp_path, device, problem):
    code, _, err = run_main(capsys, "demo", "--steps", 2, "--out", tmp_path / "d", "--device", device)
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("memleak: error: ") and problem in err, err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_track_on_cuda_without_a_gpu_is_a_usage_error():
    import torch

    import memleak
    from memleak.errors import UsageError

    with pytest.raises(UsageError, match="'cuda' is not available"):
        with memleak.track(torch.nn.Linear(2, 2), device="cuda"):
            pass


def test_headroom_prints_a_falling_fit_with_a_minus_sign(capsys):
    code, out, _ = run_main(capsys, "headroom", "--peaks", "16=1GiB,8=2GiB", "--capacity", "8GiB")
    assert code == 0
    assert "- 128.0 MiB x batch" in out and "+ -" not in out


@pytest.mark.parametrize("margin", ["1.5", "-0.1", "lots"])
def test_headroom_refuses_a_margin_outside_0_1(capsys, margin):
    code, _, err = run_main(capsys, "headroom", "--peaks", "8=1GiB,16=2GiB", "--margin", margin)
    assert code == 2 and "argument --margin" in err


def test_report_save_onto_a_file_says_so(capsys, tmp_path):
    target = tmp_path / "taken"
    target.write_text("mine")
    code, _, err = run_main(capsys, "report", EXAMPLE_RUN, "-o", target)
    assert code == 2
    assert f"{target}: exists and is not a folder" in err and "Traceback" not in err
    assert target.read_text() == "mine"


def test_report_on_a_symlink_loop_names_the_loop(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    os.symlink(b, a)
    os.symlink(a, b)
    code, _, err = run_main(capsys, "report", a)
    assert code == 2
    assert err.startswith(f"memleak: error: {a}: ") and "symbolic links" in err and "no such file" not in err


def test_report_on_a_dangling_symlink(capsys, tmp_path):
    a = tmp_path / "a"
    os.symlink(tmp_path / "gone", a)
    code, _, err = run_main(capsys, "report", a)
    assert code == 2 and "a symbolic link to nothing" in err


@pytest.mark.parametrize("where", [0, 1, "middle"])
def test_report_on_a_run_file_with_a_nul_byte(capsys, tmp_path, where):
    data = (EXAMPLE_RUN / "run.jsonl").read_bytes()
    at = len(data) // 2 if where == "middle" else where
    path = tmp_path / "run.jsonl"
    path.write_bytes(data[:at] + b"\x00" + data[at:])
    code, _, err = run_main(capsys, "report", path)
    assert code == 2
    assert err.startswith(f"memleak: error: {path}: ") and err.strip().count("\n") == 0, err
    assert "codec" not in err and "utf-16" not in err


def test_report_on_a_snapshot_pickle_end_to_end(tmp_path):
    """`memleak report x.pickle`, as the README says, through the command's main()."""
    path = sf.write(tmp_path / "x.pickle", sf.fragmented())
    result = memleak("report", path, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "PyTorch memory snapshot" in result.stdout and "fragmentation" in result.stdout
    assert (tmp_path / "out" / "memory.png").stat().st_size > 1000
    assert_one_error_line(memleak("report", sf.write(tmp_path / "y.pickle", {"no": 1})), tmp_path / "y.pickle",
                          "not a PyTorch memory snapshot")


def test_report_does_not_import_torch():
    """Analysing a run file needs no torch: `memleak report` starts in a second, on any machine."""
    import subprocess
    import sys

    code = ("import sys; from memleak.cli import main; main(['report', sys.argv[1]]); "
            "print('TORCH' if 'torch' in sys.modules else 'NO TORCH')")
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLE_RUN)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("NO TORCH"), out.stdout[-300:] + out.stderr[-2000:]


def test_report_into_a_folder_it_cannot_write_is_one_line(tmp_path, monkeypatch):
    import errno

    def read_only(self, folder):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr(Report, "save", read_only)
    result = memleak("report", EXAMPLE_RUN, "-o", tmp_path / "ro")
    assert result.returncode == 2
    assert result.stderr.strip() == f"memleak: error: {tmp_path / 'ro'}: Read-only file system"
