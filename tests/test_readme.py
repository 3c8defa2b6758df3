"""The README's commands are the ones CI and users run."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(b for b in blocks if "pytest" in b)
    assert test_cmd.strip() in ci.splitlines()


def test_readme_demo_command_is_the_installed_cli():
    readme = (ROOT / "README.md").read_text()
    assert "pip install torch==2.13.0 && pip install -e . && memleak demo" in readme
