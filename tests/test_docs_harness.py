"""docs/harness.md runs as written: its shell blocks in order in an empty folder (real lm-eval,
offline), then its Python block."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _blocks(kind: str) -> list[str]:
    """The lm-eval part's blocks (the Inspect parts' run in tests/test_inspect_native.py and tests/test_inspect.py)."""
    text = (ROOT / "docs" / "harness.md").read_text().split("\n## Inside Inspect")[0]
    return re.findall(rf"```{kind}\n(.*?)```", text, re.S)


# Put before the page's run_lm_eval.py: lm-eval's command line without indexing its thousands of built-in
# tasks (~6 s per call, 10 calls; the page's task is local). Nothing else of the page is changed.
LOCAL_TASKS_ONLY = """from lm_eval.tasks import TaskManager
_index = TaskManager.__init__
TaskManager.__init__ = lambda self, *a, **k: _index(self, *a, **dict(k, include_defaults=False))
"""


@pytest.mark.slow
@pytest.mark.integration   # minutes of real harness subprocesses: the second test command
def test_the_harness_page_runs_as_written(tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install -e '.[harness]')")
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TQDM_DISABLE="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])   # this venv's pulse-jax
    shell = [b for b in _blocks("bash") if "pip install" not in b]
    assert len(shell) == 6
    work = tmp_path / "work"
    work.mkdir()
    out = []
    for k, block in enumerate(shell):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, (k, done.stdout[-2000:], done.stderr[-3000:])
        out.append(done.stdout)
        if (work / "run_lm_eval.py").exists() and not (work / "run_lm_eval.py").read_text().startswith("from lm_eval"):
            (work / "run_lm_eval.py").write_text(LOCAL_TASKS_ONLY + (work / "run_lm_eval.py").read_text())
    done.stdout = "".join(out)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "6 models x 200 examples, 0 of 1,200 cells missing, scores in [0, 1] (binary)" in done.stdout
    assert "4 models x 200 examples" in done.stdout
    summary = json.loads((work / "sim" / "summary.json").read_text())
    assert set(summary["methods"]) == {"ucbe", "pulse", "naive"}
    report = json.loads((work / "run_report" / "report.json").read_text())
    candidates = ["toy:skill=0.3,seed=7", "toy:skill=0.4,seed=8", "toy:skill=0.5,seed=9", "toy:skill=0.6,seed=10"]
    assert report["spent"] <= 400 and report["leader"] in candidates
    # Live scores are the full runs' scores, document by document (the toy model, like a real one,
    # scores a document the same in any batch).
    from pulse_jax.fileio import data
    from pulse_jax.live import journal

    logged = data.load(work / "candidates.csv")
    column = {str(e): k for k, e in enumerate(logged.examples)}
    told = [r for r in journal.snapshot(work / "run.db")[1] if r["type"] == "tell"]
    cells = [(r["model"], e, s) for r in told for e, s in zip(r["examples"], r["scores"])]
    assert len(cells) == report["spent"]
    for model, example, score in cells:
        assert score == logged.scores[logged.models.index(model), column[str(example)]], (model, example)
    (python,) = _blocks("python")
    ran = subprocess.run([sys.executable, "-c", python], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    leader, spent = ran.stdout.split()[-2:]
    assert leader.startswith("toy:skill=") and int(spent) == 200
