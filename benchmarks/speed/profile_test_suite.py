"""Where the test command's time goes: tracing, lowering, backend compilation (or cache loads) and the
rest, per test module, from JAX's monitoring events (the plugin ``suite_profiler.py``).

Runs ``python -m pytest -q -p suite_profiler`` (the README's test command with the plugin; extra
arguments go to pytest) on the compilation cache as it is (``PULSE_JAX_CACHE`` or the suite's
default: warm after a first run), sums the per-test records, prints a table of the heaviest modules
and writes JSON (totals, modules and every test) and a Markdown table beside it.

    python benchmarks/speed/profile_test_suite.py
    python benchmarks/speed/profile_test_suite.py -- tests/test_engine.py -n 0
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

FIELDS = ("wall", "cpu", "trace", "lower", "backend", "backend_small", "n_small", "n_big")


def _records(pytest_args: list[str]) -> tuple[list[dict], str]:
    """Every test's record and pytest's last line."""
    with tempfile.TemporaryDirectory(prefix="pulse-jax-suite-profile-") as folder:
        env = dict(os.environ, SUITE_PROFILE_OUT=str(Path(folder) / "records"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_profiler", *pytest_args],
                              cwd=common.ROOT, env=env, capture_output=True, text=True)
        records = [{k: round(v, 3) if isinstance(v, float) else v for k, v in json.loads(line).items()}
                   for path in Path(folder).glob("records.*.jsonl") for line in path.open()]
    return records, (done.stdout.strip().splitlines() or [""])[-1]


def _sums(records: list[dict]) -> dict:
    total = {k: round(sum(r.get(k, 0) for r in records), 1) for k in FIELDS}
    total["rest"] = round(total["cpu"] - total["trace"] - total["lower"] - total["backend"], 1)
    return total


def main() -> None:
    p = common.parser(__doc__, out=str(common.RESULTS / "test_suite_profile.json"))
    p.add_argument("--top", type=int, default=15, help="modules in the printed table")
    p.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = p.parse_args()
    records, summary = _records(args.pytest_args)
    by_module = collections.defaultdict(list)
    for r in records:
        by_module[r["test"].split("::")[0]].append(r)
    modules = sorted(((name, _sums(rs)) for name, rs in by_module.items()), key=lambda m: -m[1]["cpu"])
    total = _sums(records)
    header = f"{'module':<44} {'cpu':>7} {'trace':>7} {'lower':>7} {'backend':>8} {'rest':>7}"
    lines = [header] + [f"{name:<44} {s['cpu']:>7.1f} {s['trace']:>7.1f} {s['lower']:>7.1f} {s['backend']:>8.1f} "
                        f"{s['rest']:>7.1f}" for name, s in [("all tests", total)] + modules[:args.top]]
    print("\n".join(lines))
    print(f"{int(total['n_small'])} small programs ({total['backend_small']} s of backend), "
          f"{int(total['n_big'])} others; pytest: {summary}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"pytest": summary, "total": total, "modules": dict(modules), "tests": records},
                              indent=1) + "\n")
    command = " ".join(["python benchmarks/speed/profile_test_suite.py", *args.pytest_args])
    table = [f"`{command}`", "", f"pytest: {summary}. Seconds summed over the tests (CPU of the worker processes).", "",
             "| module | CPU | tracing | lowering | backend | rest |", "|---|---|---|---|---|---|"]
    table += [f"| {name} | {s['cpu']:.1f} | {s['trace']:.1f} | {s['lower']:.1f} | {s['backend']:.1f} | {s['rest']:.1f} |"
              for name, s in [("all tests", total)] + modules[:args.top]]
    out.with_suffix(".md").write_text("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
