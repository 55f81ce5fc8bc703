"""The package stays readable: no function over 80 lines, and no behaviour keyed on a plug-in's name."""
import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pulse_jax"


def test_no_function_in_the_package_is_over_80_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_nothing_outside_the_registry_dispatches_on_a_plugin_name():
    pattern = re.compile(r'[!=]= *"(naive|ucbe|pulse|lucb|top_two|successive_halving|certified|budget)"')
    hits = [f"{p.name}:{k}" for p in PACKAGE.rglob("*.py") if p.name != "registry.py"
            for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits
