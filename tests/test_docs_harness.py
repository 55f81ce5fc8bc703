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
    return re.findall(rf"```{kind}\n(.*?)```", (ROOT / "docs" / "harness.md").read_text(), re.S)


LM_EVAL_LOCAL_TASKS_ONLY = """import sys
from lm_eval.tasks import TaskManager
_index = TaskManager.__init__
TaskManager.__init__ = lambda self, *a, **k: _index(self, *a, **dict(k, include_defaults=False))
from lm_eval.__main__ import cli_evaluate
sys.exit(cli_evaluate())
"""


@pytest.mark.slow
def test_the_harness_page_runs_as_written(tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install -e '.[harness]')")
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TQDM_DISABLE="1")
    # This venv's pulse-jax, and its lm_eval behind a wrapper that skips indexing lm-eval's thousands of
    # built-in tasks (~6 s per call, 10 calls; the page's task is local): lm-eval's own command line.
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    (wrapper / "lm_eval").write_text(f"#!{sys.executable}\n" + LM_EVAL_LOCAL_TASKS_ONLY)
    (wrapper / "lm_eval").chmod(0o755)
    env["PATH"] = os.pathsep.join([str(wrapper), str(Path(sys.executable).parent), env["PATH"]])
    shell = [b for b in _blocks("bash") if "pip install" not in b]
    assert len(shell) == 5
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(shell)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "6 models x 200 examples, 0 of 1,200 cells missing, scores in [0, 1] (binary)" in done.stdout
    assert "4 models x 200 examples" in done.stdout
    summary = json.loads((work / "sim" / "summary.json").read_text())
    assert set(summary["methods"]) == {"ucbe", "pulse", "naive"}
    report = json.loads((work / "run_report" / "report.json").read_text())
    assert report["spent"] <= 400 and report["leader"] in {"dummy:run=7", "dummy:run=8", "dummy:run=9", "dummy:run=10"}
    (python,) = _blocks("python")
    ran = subprocess.run([sys.executable, "-c", python], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    leader, spent = ran.stdout.split()[-2:]
    assert leader.startswith("dummy:run=") and int(spent) == 200
