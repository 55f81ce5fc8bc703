"""The test suite's wall time from a fresh clone (an empty compilation cache) and again warm.

Runs the README's test command (``python -m pytest -q``) with ``PULSE_JAX_CACHE`` pointing to a new
empty folder, then again on the now-filled cache; with ``--integration`` it also times the integration
command (``python -m pytest -q -m integration``) on that same cache, cold for it where its programs
differ. Prints a table and writes JSON (and a Markdown table beside it).

    python benchmarks/speed/bench_test_suite.py                       # the default run, cold then warm
    python benchmarks/speed/bench_test_suite.py --integration         # and the integration run after it

The machine should be idle: two workers share its cores, and anything else running slows both.
"""
from __future__ import annotations

import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402


def _timed(args: list[str], cache: Path) -> dict:
    """One pytest command in the repository with ``cache`` as the compilation cache: its wall time,
    the CPU time of its processes and pytest's summary line."""
    env = dict(os.environ, PULSE_JAX_CACHE=str(cache))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=common.ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return {"command": "python -m pytest " + " ".join(args), "wall_s": round(wall, 1),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "exit": done.returncode, "summary": lines[-1].strip("= ") if lines else done.stdout[-300:]}


def main() -> None:
    p = common.parser(__doc__, out=str(common.RESULTS / "test_suite.json"))
    p.add_argument("--integration", action="store_true", help="also time the integration command")
    p.add_argument("--no-warm", action="store_true", help="time the default command cold only")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pulse-jax-cold-cache-") as folder:
        cache = Path(folder)
        runs = [("default, cold", ["-q"])] + ([] if args.no_warm else [("default, warm", ["-q"])])
        if args.integration:
            runs.append(("integration, after the default run", ["-q", "-m", "integration"]))
        for label, pytest_args in runs:
            print(f"running {label} ...", file=sys.stderr, flush=True)
            rows.append({"run": label, **_timed(pytest_args, cache)})
    print(f"{'run':<36} {'wall':>9} {'cpu':>9}  summary")
    for r in rows:
        print(f"{r['run']:<36} {r['wall_s'] / 60:>7.1f} m {r['cpu_s'] / 60:>7.1f} m  {r['summary']}")
    result = {"cores": os.cpu_count(), "machine": platform.processor() or platform.machine(), "runs": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    flags = (" --integration" if args.integration else "") + (" --no-warm" if args.no_warm else "")
    table = ["`python benchmarks/speed/bench_test_suite.py" + flags + "`",
             "", f"{os.cpu_count()} cores.", "", "| run | wall (min) | CPU (min) | pytest |", "|---|---|---|---|"]
    table += [f"| {r['run']} | {r['wall_s'] / 60:.1f} | {r['cpu_s'] / 60:.1f} | {r['summary']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(table) + "\n")
    if any(r["exit"] != 0 for r in rows):
        sys.exit("a test run failed: " + "; ".join(f"{r['run']}: {r['summary']}" for r in rows if r["exit"]))


if __name__ == "__main__":
    main()
