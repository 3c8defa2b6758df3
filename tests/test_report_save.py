"""report.save replaces its own earlier report, and never a file of the user's with the same name."""
from pathlib import Path

import pytest

import memleak
from helpers import memleak_in_process

EXAMPLE_RUN = Path(__file__).resolve().parent / "data" / "example_run"


@pytest.fixture(scope="module")
def report():
    return memleak.analyze(memleak.load(EXAMPLE_RUN))


def test_saving_twice_replaces_the_earlier_report(report, tmp_path):
    first = report.save(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in first}
    second = report.save(tmp_path)
    assert second == first
    assert {"report.txt", "report.html", "findings.json", "memory.png", "suspects.png"} <= {p.name for p in second}
    assert all(p.stat().st_mtime_ns >= before[p] for p in second)


@pytest.mark.parametrize("name", ["report.txt", "report.html", "findings.json", "memory.png", "suspects.png"])
def test_a_file_of_the_users_is_never_written_over(report, tmp_path, name):
    mine = tmp_path / name
    mine.write_bytes(b"my own notes\n")
    with pytest.raises(memleak.UsageError, match="was not written by memleak") as e:
        report.save(tmp_path)
    assert str(mine) in str(e.value)
    assert mine.read_bytes() == b"my own notes\n"
    assert [p.name for p in tmp_path.iterdir()] == [name]  # refused before anything was written


def test_a_folder_in_the_way_is_refused(report, tmp_path):
    (tmp_path / "memory.png").mkdir()
    with pytest.raises(memleak.UsageError, match="memory.png"):
        report.save(tmp_path)


def test_the_command_says_so_in_one_line(tmp_path):
    mine = tmp_path / "report.txt"
    mine.write_text("keep me")
    result = memleak_in_process("report", EXAMPLE_RUN, "-o", tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memleak: error: {mine}: exists and was not written by memleak")
    assert mine.read_text() == "keep me"


def test_without_plotly_every_file_but_the_html_page_is_written(report, tmp_path, monkeypatch, caplog):
    # the GPU machine had no plotly (a declared dependency) and `memleak run` lost its whole report
    import sys

    for name in [m for m in sys.modules if m == "plotly" or m.startswith("plotly.")] + ["plotly"]:
        monkeypatch.setitem(sys.modules, name, None)  # import plotly... raises ImportError
    written = report.save(tmp_path)
    names = {p.name for p in written}
    assert {"report.txt", "findings.json", "memory.png"} <= names and "report.html" not in names
    assert all(p.is_file() for p in written) and not (tmp_path / "report.html").exists()
    assert [r.getMessage() for r in caplog.records if "report.html" in r.getMessage()] == [
        f"{tmp_path / 'report.html'} not written: memleak's HTML report needs plotly: pip install plotly"
    ]
