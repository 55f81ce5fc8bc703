"""How many operations one kernel step lowers to (`pulse_jax.engine.op_count`): per method and
stopping rule, the StableHLO operations JAX writes, the instructions XLA compiles on this backend, and
the thunks of a whole run's scan body per step, without and with a refit. Fewer operations per step
is what a GPU pays for in kernel launches.

    python benchmarks/speed/step_operations.py --out docs/benchmarks/step_operations.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402


def main(argv=None) -> int:
    import jax

    from pulse_jax.engine.op_count import SMALL, scan_body_thunks, step_operations

    args = common.parser(__doc__, out=None).parse_args(argv)
    rows = []
    for method in ("ucbe", "pulse", "pulse_hedged"):
        for stop in ("budget", "certified"):
            counts = step_operations(method, compiled=True, stop=stop, rule="top_two_interval")
            thunks = scan_body_thunks(method, stop=stop, rule="top_two_interval")
            rows.append({"method": method, "stop": stop, **counts, "thunks": thunks["step"],
                         "thunks_with_refit": thunks["refit_step"]})
            print(f"{method:>12} {stop:>9}: {counts['lowered']:,} lowered, {counts['compiled']:,} compiled, "
                  f"{thunks['step']:,} thunks per step", file=sys.stderr)
    lines = ["| method | stop | lowered operations | compiled instructions | thunks per step (with a refit) |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {r['method']} | {r['stop']} | {r['lowered']:,} | {r['compiled']:,} | {r['thunks']:,} "
              f"({r['thunks_with_refit']:,}) |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        result = {"command": "python benchmarks/speed/step_operations.py " + " ".join(argv or sys.argv[1:]),
                  "jax": jax.__version__, "backend": jax.default_backend(), "problem": SMALL,
                  "machine": f"{platform.machine()}, Python {platform.python_version()}", "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=2))
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
