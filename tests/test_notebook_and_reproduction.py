"""The notebooks run top to bottom, and the paper reproduction runs end to end (tiny)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_notebook(name, monkeypatch) -> dict:
    """Execute every code cell in order (small configuration), skipping shell / magic lines."""
    monkeypatch.setenv("PULSE_NOTEBOOK_SMALL", "1")
    # CI installs no IPython: run as plain Python does here too, whatever this environment has.
    monkeypatch.setitem(sys.modules, "IPython", None)
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    notebook = json.loads((ROOT / "notebooks" / name).read_text())
    namespace = {"__name__": "__notebook__"}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(line for line in cell["source"] if not line.lstrip().startswith(("%", "!")))
        exec(compile(source, name, "exec"), namespace)   # noqa: S102 -- our own notebook
    return namespace


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_quickstart_notebook_runs_top_to_bottom(monkeypatch):
    namespace = _run_notebook("quickstart.ipynb", monkeypatch)
    assert set(namespace["results"]) == {"ucbe", "pulse", "naive"}
    assert 0 <= namespace["res"].correct()[:, -1].mean() <= 1


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_sweep_notebook_runs_top_to_bottom(monkeypatch):
    namespace = _run_notebook("sweep.ipynb", monkeypatch)
    result, own = namespace["result"], namespace["own"]
    assert len(result.points) == 8 and len(own.points) == 3
    assert result.baseline == 4 and result.compile_seconds <= result.seconds
    assert namespace["paths"]["figure"].stat().st_size > 5000


def _repository() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_notebooks_are_colab_ready_with_ids_and_the_outputs_of_a_real_run():
    nbformat = pytest.importorskip("nbformat", reason="nbformat comes with the dev extra")
    repo = _repository()
    owner_name = repo.removeprefix("https://github.com/")
    for name in ("quickstart.ipynb", "sweep.ipynb"):
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        nbformat.validate(nb)
        assert (nb.nbformat, nb.nbformat_minor) >= (4, 5)
        ids = [cell["id"] for cell in nb.cells]
        assert len(set(ids)) == len(ids)
        first, install = nb.cells[0], nb.cells[1]
        assert f"https://colab.research.google.com/github/{owner_name}/blob/main/notebooks/{name}" in first.source
        assert "GPU" in first.source                                     # how to pick an accelerator
        # Installs without a restart: a regular install, from the local clone or the repository.
        assert "pip" in install.source and f"git+{repo}" in install.source and "-e" not in install.source.split()
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        assert all(isinstance(cell.get("execution_count"), int) for cell in code)
        outputs = [out for cell in code for out in cell.outputs]
        assert not [out for out in outputs if out.output_type == "error"]
        assert sum(1 for cell in code if cell.outputs) >= len(code) - 1   # every cell but the install shows output
        if name == "quickstart.ipynb":
            assert any("image/png" in out.get("data", {}) for out in outputs)   # the accuracy figure


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_reproduce_paper_tiny_end_to_end_and_resume(tmp_path, shared_data):
    script = ROOT / "benchmarks" / "paper" / "reproduce_paper.py"
    args = [sys.executable, str(script), "--tiny", "--out", str(tmp_path), "--data", str(shared_data),
            "--datasets", "mmlu_pro,cruxeval"]
    first = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    table = (tmp_path / "table.md").read_text()
    assert "mmlu_pro_d0.02" in table and "cruxeval" in table and "PULSE" in table
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3
    for name in ("budget_to_95.png", "budget_to_95.pdf", "accuracy_cruxeval.png", "effective_budget_cruxeval.png"):
        assert (tmp_path / name).stat().st_size > 1000
    second = subprocess.run(args, capture_output=True, text=True, timeout=600)   # resumes: nothing recomputed
    assert second.returncode == 0 and second.stderr.count("resumed from") == 6
    assert (tmp_path / "table.md").read_text() == table
