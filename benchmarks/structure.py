"""Structure facts of the package: top-level modules, deprecated modules, largest module (and those
over 600 lines), longest function, most positional parameters (in the engine and anywhere), import
circles (at run time and through annotation-only imports), private names used across modules, ``Any``
annotations, imports of the command line (or argparse) outside it, modules named like the standard
library's. Prints a table and writes JSON.

    python benchmarks/structure.py --out docs/benchmarks/structure.json

Imports are read from the source (``ast``), at module level and inside functions alike, so a
circle hidden behind a lazy import still counts.
"""
from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pulse_jax"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(trees: dict[str, ast.Module], annotations: bool = False
            ) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """``(edges, private)``: the package modules each module imports (annotation-only imports under
    ``TYPE_CHECKING`` left out unless ``annotations``), and every ``(importer, module, name)`` with a
    private name."""
    edges, private = {m: set() for m in trees}, []
    for name, tree in trees.items():
        skip = set()
        for node in ast.walk(tree):   # `if TYPE_CHECKING:` blocks import for annotations only
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING" and not annotations:
                skip.update(id(n) for sub in node.body for n in ast.walk(sub))
        bound = {}   # local name -> package module it is bound to
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in trees:
                        edges[name].add(alias.name)
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, node, False)
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in trees:
                        edges[name].add(full)
                        bound[alias.asname or alias.name] = full
                    elif target in trees:
                        edges[name].add(target)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append((name, target, alias.name))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in bound):
                private.append((name, bound[node.value.id], node.attr))
    for m in edges:
        edges[m].discard(m)
        edges[m] = {t for t in edges[m] if not m.startswith(t + ".") and t != "pulse_jax"}
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


PLUGIN_PACKAGES = ("pulse_jax.estimators", "pulse_jax.rules", "pulse_jax.stopping")


def engine_reaches_built_ins(edges: dict[str, set[str]]) -> list[str]:
    """The built-in plug-in modules (and the plug-in packages, which import them) that any
    ``pulse_jax.engine`` module reaches through its imports, directly or not; the interfaces
    (``*.base``) are allowed."""
    seen, todo = set(), [m for m in edges if m == "pulse_jax.engine" or m.startswith("pulse_jax.engine.")]
    while todo:
        for t in edges.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(m for m in seen if (m in PLUGIN_PACKAGES or m.rsplit(".", 1)[0] in PLUGIN_PACKAGES)
                  and not m.endswith(".base"))


GROUPS = ("engine", "stats", "live", "fileio", "harnesses", "analysis", "estimators", "rules", "stopping", "cli")


def top_level_modules(trees: dict[str, ast.Module]) -> list[str]:
    """The modules directly in ``pulse_jax/`` (not ``__init__``, not a subpackage)."""
    return sorted(m for m in trees if m.count(".") == 1 and (PACKAGE / (m.split(".")[1] + ".py")).exists())


def deprecated_modules(trees: dict[str, ast.Module]) -> list[str]:
    """Modules that warn of their own deprecation or say they are deprecated in their docstring."""
    out = []
    for m, tree in trees.items():
        doc = (ast.get_docstring(tree) or "").lower()
        warns = any(isinstance(n, ast.Name) and n.id in ("DeprecationWarning", "FutureWarning") for n in ast.walk(tree))
        if "deprecat" in doc or warns:
            out.append(m)
    return sorted(out)


def imports_named(trees: dict[str, ast.Module], wanted) -> list[str]:
    """``module -> imported`` for every import (module level or inside a function) of a module that
    ``wanted(name)`` accepts, outside ``pulse_jax.cli``."""
    out = set()
    for m, tree in trees.items():
        if m == "pulse_jax.cli" or m.startswith("pulse_jax.cli."):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [_resolve(m, node, m in PACKAGE_MODULES) or ""] if isinstance(node, ast.ImportFrom) else []
            out.update(f"{m} -> {n}" for n in names if wanted(n))
    return sorted(out)


PACKAGE_MODULES: set = set()   # filled by `facts` (modules that are packages)


def standard_library_names(trees: dict[str, ast.Module]) -> list[str]:
    """Modules of the package named like a standard-library module (``pulse_jax/inspect.py``): Python
    started in that folder imports them instead of the standard library's."""
    import sys

    return sorted(m for m in trees if m.rsplit(".", 1)[-1] in sys.stdlib_module_names)


def positional(node) -> int:
    """Positional parameters of a function, ``self`` / ``cls`` not counted."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return len(names) - (1 if names and names[0] in ("self", "cls") else 0)


def most_positional(trees: dict[str, ast.Module], prefix: str = "pulse_jax.") -> tuple[int, str]:
    return max(((positional(n), f"{m}.{n.name}") for m, t in trees.items() if m.startswith(prefix)
                for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), default=(0, ""))


def group_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between groups: a package under ``pulse_jax`` (``engine``, ``live``, ``io``,
    ``analysis``, the plug-in kinds) is one node, every other module its own."""
    def group(m):
        parts = m.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in GROUPS else m
    out = {}
    for a, targets in edges.items():
        for b in targets:
            if group(a) != group(b):
                out.setdefault(group(a), set()).add(group(b))
    return out


def facts() -> dict:
    trees = modules()
    PACKAGE_MODULES.update(m for m in trees if (PACKAGE.parent / m.replace(".", "/") / "__init__.py").exists())
    sizes = {m: len((PACKAGE.parent / (m.replace(".", "/") + ".py")).read_text().splitlines())
             if (PACKAGE.parent / (m.replace(".", "/") + ".py")).exists()
             else len((PACKAGE.parent / m.replace(".", "/") / "__init__.py").read_text().splitlines()) for m in trees}
    longest = max(((n.end_lineno - n.lineno + 1, f"{m}.{n.name}") for m, t in trees.items() for n in ast.walk(t)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))))
    edges, private = imports(trees)
    with_annotations, _ = imports(trees, annotations=True)
    engine_args, anywhere_args = most_positional(trees, "pulse_jax.engine"), most_positional(trees)
    any_count = sum(1 for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.Name) and n.id == "Any")
    largest = max(sizes.items(), key=lambda kv: kv[1])
    return {"modules": len(trees), "largest_module": {"name": largest[0], "lines": largest[1]},
            "longest_function": {"name": longest[1], "lines": longest[0]}, "import_circles": cycles(edges),
            "private_cross_module_names": sorted({f"{a} -> {b}.{n}" for a, b, n in private}),
            "any_annotations": any_count, "engine_reaches_built_ins": engine_reaches_built_ins(edges),
            "group_circles": cycles(group_edges(edges)),
            "annotation_circles": [c for c in cycles(with_annotations) if c not in cycles(edges)],
            "top_level_modules": top_level_modules(trees), "deprecated_modules": deprecated_modules(trees),
            "most_positional_engine": {"name": engine_args[1], "count": engine_args[0]},
            "most_positional": {"name": anywhere_args[1], "count": anywhere_args[0]},
            "modules_over_600_lines": sorted(m for m, n in sizes.items() if n > 600),
            "cli_imports_outside_cli": imports_named(trees, lambda n: n == "pulse_jax.cli" or n.startswith("pulse_jax.cli.")),
            "argparse_outside_cli": imports_named(trees, lambda n: n == "argparse"),
            "standard_library_names": standard_library_names(trees)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the facts as JSON here")
    args = parser.parse_args(argv)
    f = facts()
    rows = [("modules", f["modules"]), ("top-level modules (besides subpackages)", len(f["top_level_modules"])),
            ("deprecated modules", len(f["deprecated_modules"])), ("largest module", f"{f['largest_module']['name']} ({f['largest_module']['lines']} lines)"),
            ("longest function", f"{f['longest_function']['name']} ({f['longest_function']['lines']} lines)"),
            ("most positional parameters, engine",
             f"{f['most_positional_engine']['name']} ({f['most_positional_engine']['count']})"),
            ("most positional parameters, anywhere", f"{f['most_positional']['name']} ({f['most_positional']['count']})"),
            ("import circles", len(f["import_circles"])),
            ("import circles through annotation-only imports", len(f["annotation_circles"])),
            ("private names across modules", len(f["private_cross_module_names"])),
            ("`Any` in annotations and code", f["any_annotations"]),
            ("built-in plug-ins the engine imports", len(f["engine_reaches_built_ins"])),
            ("circles between groups (engine, live, fileio, harnesses, analysis, ...)", len(f["group_circles"])),
            ("modules over 600 lines", len(f["modules_over_600_lines"])),
            ("imports of pulse_jax.cli outside it", len(f["cli_imports_outside_cli"])),
            ("argparse outside pulse_jax.cli", len(f["argparse_outside_cli"])),
            ("modules named like the standard library's", len(f["standard_library_names"]))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    for circle in f["import_circles"]:
        print("  circle:", " <-> ".join(circle))
    for name in f["private_cross_module_names"]:
        print("  private:", name)
    for key in ("modules_over_600_lines", "cli_imports_outside_cli", "argparse_outside_cli", "standard_library_names"):
        for name in f[key]:
            print(f"  {key.replace('_', ' ')}: {name}")
    if args.out:
        Path(args.out).write_text(json.dumps(f, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
