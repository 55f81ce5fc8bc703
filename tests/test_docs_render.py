"""The API reference renders: no reStructuredText role is left in a docstring the site shows (the strict
build fails on one, docs/_hooks/unrendered_roles.py), and Google-style entries name one parameter each,
so no parameter with a default is shown as required."""
import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pulse_jax"
ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|attr|data|exc|obj|const):`")
COMBINED = re.compile(r"^\s{4,8}[a-z_][a-z_0-9]*(, [a-z_][a-z_0-9]*)+: ", re.M)


def _docstrings():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node, clean=False)
                if text:
                    yield f"{path.relative_to(PACKAGE)}:{getattr(node, 'name', '<module>')}", text


def test_no_restructuredtext_roles_in_docstrings():
    found = [where for where, text in _docstrings() if ROLE.search(text)]
    assert not found, found[:10]


def test_args_entries_name_one_parameter_each():
    found = []
    for where, text in _docstrings():
        for section in re.split(r"\n\s*\n", text):
            if re.search(r"^\s*(Args|Attributes|Arguments|Parameters):\s*$", section, re.M) and COMBINED.search(section):
                found.append(f"{where}: {COMBINED.search(section).group(0).strip()}")
    assert not found, found


def test_the_hook_catches_a_role():
    import pytest

    mkdocs = pytest.importorskip("mkdocs")
    del mkdocs
    import importlib.util

    spec = importlib.util.spec_from_file_location("roles", PACKAGE.parent / "docs" / "_hooks" / "unrendered_roles.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    class Page:
        class file:
            src_path = "api.md"

    assert hook.on_page_content("<p>fine <code>x</code></p>", Page, None, None)
    with pytest.raises(Exception, match="unrendered reStructuredText role"):
        hook.on_page_content("<p>see :class:`pulse_jax.Estimator`</p>", Page, None, None)
