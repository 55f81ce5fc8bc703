"""The package stays readable: the structure targets of ``benchmarks/structure.py`` (no deprecated
module, at most 10 top-level modules, no function over 60 lines, no engine function over 6 positional
parameters, no import circle at run time or through annotations, ``Any`` at most 21), and no
behaviour keyed on a plug-in's name."""
import ast
import functools
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pulse_jax"


def test_no_function_in_the_package_is_over_60_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{path.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_nothing_outside_the_registry_dispatches_on_a_plugin_name():
    pattern = re.compile(r'[!=]= *"(naive|ucbe|pulse|lucb|top_two|successive_halving|certified|budget)"')
    hits = [f"{p.name}:{k}" for p in PACKAGE.rglob("*.py") if p.name != "registry.py"
            for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def _structure():
    import importlib.util

    path = PACKAGE.parent / "benchmarks" / "structure.py"
    spec = importlib.util.spec_from_file_location("structure", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=1)
def _facts() -> dict:
    """The package's structure facts, read once per process for the tests below (they only read them)."""
    return _structure().facts()


def test_no_import_circles_and_no_private_names_across_modules():
    """Imports go one way (lazy imports inside functions count too), and no module reaches into
    another's private names."""
    facts = _facts()
    assert facts["import_circles"] == [], facts["import_circles"]
    assert facts["private_cross_module_names"] == [], facts["private_cross_module_names"]
    assert facts["group_circles"] == [], facts["group_circles"]   # engine, live, fileio, harnesses, analysis: one way too


def test_the_structure_targets_hold():
    """0 deprecated modules; at most 10 modules at the top of the package; no engine function with more
    than 6 positional parameters (the bound kernel's one argument order); no circle through
    annotation-only imports either; ``Any`` at most 21."""
    facts = _facts()
    assert facts["deprecated_modules"] == [], facts["deprecated_modules"]
    assert len(facts["top_level_modules"]) <= 10, facts["top_level_modules"]
    assert facts["most_positional_engine"]["count"] <= 6, facts["most_positional_engine"]
    assert facts["annotation_circles"] == [], facts["annotation_circles"]
    assert facts["any_annotations"] <= 21, facts["any_annotations"]
    assert facts["longest_function"]["lines"] <= 60, facts["longest_function"]


def test_the_library_stands_without_its_command_line():
    """Nothing outside ``pulse_jax/cli/`` imports ``pulse_jax.cli`` or ``argparse``; no module is named
    like a standard-library module (Python started in its folder would import it instead); no file is
    over 600 lines; no function anywhere takes more than 6 positional parameters."""
    facts = _facts()
    assert facts["cli_imports_outside_cli"] == [], facts["cli_imports_outside_cli"]
    assert facts["argparse_outside_cli"] == [], facts["argparse_outside_cli"]
    assert facts["standard_library_names"] == [], facts["standard_library_names"]
    assert facts["modules_over_600_lines"] == [], facts["modules_over_600_lines"]
    assert facts["most_positional"]["count"] <= 6, facts["most_positional"]


def test_no_deprecation_layer_is_left():
    """The removed modules do not import, and nothing in the package speaks of deprecation."""
    import importlib

    import pytest

    for old in ("bandit", "data", "journal", "runner", "selector", "metrics", "plotting", "report", "provenance",
                "harness", "live_report", "bookkeeping", "adaptive", "moved"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"pulse_jax.{old}")
    mentions = [f"{p.relative_to(PACKAGE)}:{k}" for p in PACKAGE.rglob("*.py")
                for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "deprecat" in line.lower()]
    assert not mentions, mentions


def test_the_structure_check_finds_a_deprecated_module_and_an_annotation_circle():
    """The new checks can fail: a module that warns of its deprecation, a circle through TYPE_CHECKING."""
    import ast as _ast

    structure = _structure()
    shim = _ast.parse('"""Moved."""\nimport warnings\nwarnings.warn("x", DeprecationWarning)\n')
    assert structure.deprecated_modules({"pulse_jax.old": shim, "pulse_jax.new": _ast.parse("x = 1\n")}) == \
        ["pulse_jax.old"]
    trees = {"pulse_jax.a": _ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pulse_jax.b import B\n"),
             "pulse_jax.b": _ast.parse("from pulse_jax import a\n")}
    assert structure.cycles(structure.imports(trees)[0]) == []
    assert structure.cycles(structure.imports(trees, annotations=True)[0]) == [["pulse_jax.a", "pulse_jax.b"]]


def test_the_engine_imports_no_built_in_plugin():
    """The engine knows the plug-in interfaces only; the catalogue adds itself (``BUILT_IN`` tables)."""
    assert _facts()["engine_reaches_built_ins"] == []


def test_the_engine_check_sees_an_indirect_import_of_a_built_in():
    structure = _structure()
    edges = {"pulse_jax.engine.kernel": {"pulse_jax.registry"}, "pulse_jax.registry": {"pulse_jax.rules.lucb"},
             "pulse_jax.rules.lucb": {"pulse_jax.rules.base"}}
    assert structure.engine_reaches_built_ins(edges) == ["pulse_jax.rules.lucb"]


def test_the_structure_check_finds_a_circle_and_a_private_name():
    """The checker itself can fail: a made-up package with a circle and a private import."""
    import ast as _ast

    structure = _structure()
    trees = {"pulse_jax.a": _ast.parse("from pulse_jax.b import _hidden\n"),
             "pulse_jax.b": _ast.parse("def f():\n    from pulse_jax import a\n")}
    edges, private = structure.imports(trees)
    assert structure.cycles(edges) == [["pulse_jax.a", "pulse_jax.b"]]
    assert private == [("pulse_jax.a", "pulse_jax.b", "_hidden")]


def test_nothing_outside_live_holds_a_selectors_log():
    """The command line and the Inspect harness read and write a selection's log through
    `pulse_jax.live.runner_log` (or the selector), never through ``selector.ledger``."""
    reach = re.compile(r"\bselector\.ledger\b")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.parent.name != "live"
             for n, line in enumerate(path.read_text().splitlines(), 1) if reach.search(line)]
    assert found == []
    assert reach.search("x = self.selector.ledger.asked_cells()")       # the check sees the reach it forbids


def test_only_the_kernel_sets_a_stop_and_the_selector_stays_thin():
    """A run's stop is decided by the kernel's ``stop_status`` and set in ``BanditState.stopped`` by the
    kernel alone: no module outside ``engine/kernel.py`` replaces a `Status`'s ``done`` or ``hold`` or a
    state's ``stopped`` (a stop flag kept beside the kernel's would let a reader of the kernel believe
    the wrong thing about who stops a live run). The live selector is a thin shell around
    `pulse_jax.live.core`: at most 250 lines."""
    replaces = re.compile(r"_replace\((?:[^)]*\b)?(done|hold|stopped)\s*=")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).as_posix() != "engine/kernel.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if replaces.search(line)]
    assert found == []
    assert replaces.search("status = status._replace(done=np.bool_(False), hold=hold)")   # what it forbids
    assert replaces.search("state._replace(U=U, stopped=state.stopped | fires)")
    assert len((PACKAGE / "live" / "selector.py").read_text().splitlines()) <= 250
