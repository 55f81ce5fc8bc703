import pytest
"""docs/extending.md runs as written: its files are saved, its Python blocks executed in order, its
console commands run through the CLI."""
import re
import shlex
import sys
from pathlib import Path

from pulse_jax import cli

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def _blocks():
    return [(lang, meta.strip(), body) for lang, meta, body in BLOCK.findall(PAGE.read_text(encoding="utf-8"))]


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_the_extending_page_runs_as_written(tmp_path, monkeypatch, capsys):
    blocks = _blocks()
    files = [b for b in blocks if b[0] == "python" and b[1].startswith("title=")]
    code = [b for b in blocks if b[0] == "python" and not b[1]]
    commands = [line[2:] for lang, _, body in blocks if lang == "console" for line in body.splitlines()
                if line.startswith("$ ")]
    assert len(files) == 3 and len(code) >= 3 and commands   # an estimator, a rule, a stopping rule; then runs
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for _, meta, body in files:
        (tmp_path / meta.split("=", 1)[1].strip('"')).write_text(body, encoding="utf-8")
    namespace = {"__name__": "extending_page"}
    for _, _, body in code:
        exec(compile(body, str(PAGE), "exec"), namespace)   # noqa: S102 -- the page's own examples
    printed = capsys.readouterr().out
    assert "mine:" in printed and "UCB-E:" in printed and "epsilon 0.1" in printed and "Leader:" in printed
    assert "stopped: True after" in printed and "is within 0.1 of the best model" in printed
    # The cost-aware and the focus-aware examples run (inputs.cost and inputs.focus are filled in).
    assert "cost-aware: median money spent" in printed and "focus-aware:" in printed, printed[-600:]
    # The stopping rule fires, and sooner for a larger epsilon (the sweep shows its effect).
    spent = [float(x.replace(",", "")) for x in re.findall(r"epsilon [\d.]+ +mean cells spent ([\d,]+)", printed)]
    assert len(spent) == 3 and spent[0] > spent[1] > spent[2] and spent[2] < 4000, spent
    # The estimator's own number is swept: no shrinkage is unbiased, 64 pseudo-cells pull the estimates.
    bias = dict(re.findall(r"strength (\d+): mean estimate - truth ([+-][\d.]+)", printed))
    assert abs(float(bias["0"])) < 0.005 and abs(float(bias["64"])) > 0.01, bias
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "pulse-jax"
        assert cli.main(argv[1:]) == 0, capsys.readouterr().err
    assert "shrunk_mean" in capsys.readouterr().out
    assert (tmp_path / "extending_demo" / "summary.json").is_file()
    for module in ("shrunk_mean", "racing", "epsilon_best"):
        sys.modules.pop(module, None)
