"""The notebook in notebooks/ runs top to bottom against the shipped example run (so it cannot rot)."""
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("jupyter_client.kernelspec")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def python3_kernel_or_skip():
    try:
        kernelspec.KernelSpecManager().get_kernel_spec("python3")
    except kernelspec.NoSuchKernel:
        pytest.skip("no 'python3' Jupyter kernel (pip install ipykernel)")


def test_there_is_a_notebook():
    assert [p.name for p in NOTEBOOKS] == ["analyze_run.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_shows_the_plot_and_suspects(path, monkeypatch):
    python3_kernel_or_skip()
    # the kernel imports this checkout's memleak, not whichever one pip installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "report.plot() showed no image"
    assert any("text/html" in o.get("data", {}) for o in outputs), "run.steps showed no DataFrame"
    pages = [o["data"]["text/html"] for o in outputs if 'class="memleak-report"' in o.get("data", {}).get("text/html", "")]
    assert len(pages) == 1, "the report did not display as its HTML page"
    assert "Plotly.newPlot(" in pages[0] and "encoder.1.cache" in pages[0] and "<html" not in pages[0]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "leak" in text and "encoder.1.cache" in text  # the verdict and the top suspect of the example run
