"""Every docs page's Python runs on its own: the page's blocks, in order, in a fresh interpreter namespace
and an empty folder (no page relies on another having run), with repetitions cut to a few so the suite
stays quick; each page prints what it shows."""
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ["simulations.md", "sweeps.md", "confidence.md", "certificates.md", "live.md", "data.md"]


def _code(page: str) -> str:
    text = (DOCS / page).read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert blocks, f"{page} has no Python block"
    return re.sub(r"reps=\d+", "reps=4", "\n".join(blocks))


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_each_page_runs_alone(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"docs_{page[:-3]}"}
    exec(compile(_code(page), str(DOCS / page), "exec"), namespace)   # noqa: S102 -- the page's own code
    out = capsys.readouterr().out
    assert out.strip(), f"{page} prints nothing"
