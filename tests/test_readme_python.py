"""The README's Python block runs as written, and every printed value its comments state is what it prints.

A comment states a value when it starts with the printed line's first token (a number): the comment,
up to an opening parenthesis, must then be what the line prints. Integration: it runs the block's
full 300-repetition simulations (several minutes on 2 cores), so it runs in the second test command
(`python -m pytest -q -m integration`).
"""
import contextlib
import io
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_readmes_python_block_prints_what_its_comments_say(tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Python in 30 lines")[1].split("```python\n")[1].split("```")[0]
    claims = []
    for line in block.splitlines():
        if line.startswith("print(") and "#" in line:
            claims.append(line.split("#", 1)[1].strip())
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    lines = printed.getvalue().splitlines()
    stated = [c.split(" (")[0] for c in claims if re.match(r"[\d.,]+ ", c)]
    assert len(stated) == 2, claims                         # budget_to_target and the certification line
    for value in stated:
        assert value in lines, (value, lines)
