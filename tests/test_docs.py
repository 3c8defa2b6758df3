"""The docs match the code: code blocks parse, commands parse, links resolve, examples run."""
import ast
import re
import shlex
from pathlib import Path

import pytest

import memleak
from memleak.cli import build_parser
from memleak.schema import STEP_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
# Pages other people write; a link to one that has not landed yet is not this test's failure.
OTHERS = {"detectors-growth.md", "detectors-fragmentation.md", "snapshots.md", "detectors-culprits.md",
          "distributed.md"}


def blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


def test_the_pages_this_project_promises_exist():
    names = {p.name for p in DOCS}
    assert {"index.md", "quickstart.md", "usage.md", "run-format.md", "faq.md", "architecture.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_python_blocks_parse(page):
    for code in blocks(page, "python"):
        ast.parse(code)


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_memleak_commands_parse(page):
    parser = build_parser()
    for code in blocks(page, "bash"):
        for line in code.splitlines():
            for command in line.split("&&"):
                argv = shlex.split(command.strip())
                if argv[:1] == ["python"] and argv[1:3] == ["-m", "memleak"]:
                    argv = argv[2:]
                if argv[:1] != ["memleak"]:
                    continue
                try:
                    parser.parse_args(argv[1:])
                except SystemExit as e:
                    pytest.fail(f"{page.name}: `{command.strip()}` does not parse (exit {e.code})")


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_relative_links_resolve(page):
    missing_others = []
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
        path = (page.parent / target).resolve()
        if path.exists():
            continue
        if path.name in OTHERS:
            missing_others.append(path.name)
            continue
        pytest.fail(f"{page.name} links to {target}, which does not exist")
    if missing_others:
        pytest.skip(f"{page.name} links to pages not written yet: {sorted(set(missing_others))}")


def test_run_format_documents_every_step_column():
    text = (ROOT / "docs" / "run-format.md").read_text()
    missing = [c for c in STEP_COLUMNS if f"`{c}`" not in text]
    assert not missing


def test_run_format_documents_every_event_the_recorder_writes():
    text = (ROOT / "docs" / "run-format.md").read_text()
    sources = "".join(p.read_text() for p in (ROOT / "memleak").rglob("*.py"))
    events = set(re.findall(r"\.event\(\"([a-z_]+)\"", sources))
    assert events and not [e for e in events if f"`{e}`" not in text]


def test_run_format_reader_matches_memleak_load(monkeypatch):
    code = next(b for b in blocks(ROOT / "docs" / "run-format.md", "python") if "json.loads" in b)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(code, "run-format.md", "exec"), scope)
    steps = memleak.load(ROOT / "tests" / "data" / "example_run").steps
    assert len(scope["rows"]) == len(steps)
    for col in ("step", "heap_bytes", "rss_bytes"):
        assert [r.get(col) for r in scope["rows"]] == steps[col].tolist()


def test_quickstart_examples_run(tmp_path, monkeypatch):
    track, load = [b for b in blocks(ROOT / "docs" / "quickstart.md", "python") if "import memleak" in b]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(track, "quickstart.md", "exec"), scope)
    assert scope["report"].leak and (tmp_path / "runs" / "exp1" / "run.jsonl").is_file()
    assert "outputs" in scope["report"].suspects[0].location
    monkeypatch.chdir(ROOT)
    scope = {}
    exec(compile(load, "quickstart.md", "exec"), scope)
    assert scope["fig"].axes


pytest_plugins = ["pytester"]


def test_the_pytest_examples_pass(pytester):
    """The README's and the quickstart's memleak_check examples, in one inner pytest session."""
    pages = {"readme": ROOT / "README.md", "quickstart": ROOT / "docs" / "quickstart.md"}
    for name, page in pages.items():
        code = next(b for b in blocks(page, "python") if "memleak_check" in b)
        # not test_readme.py: a worker that ran tests/test_readme.py holds that module name
        pytester.makepyfile(**{f"test_{name}_example": "import pytest\nimport torch\n\n" + code})
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=len(pages))


LAYERS_WITHOUT_TORCH = ["memleak/detect", "memleak/run.py", "memleak/schema.py", "memleak/suspects.py",
                        "memleak/report", "memleak/units.py", "memleak/errors.py", "memleak/analysis.py"]


@pytest.mark.parametrize("where", LAYERS_WITHOUT_TORCH)
def test_architecture_analysis_layers_never_import_torch(where):
    path = ROOT / where
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            assert not [n for n in names if n.split(".")[0] == "torch"], f"{f.relative_to(ROOT)} imports torch"
