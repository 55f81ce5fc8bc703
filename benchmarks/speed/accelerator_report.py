"""Everything the engine's speed rests on, on whatever backend JAX finds, in one command.

* **Full scale** (the paper's MMLU-Pro setting: 1,000 x 12,032, rank 100, B = 64, 400,000
  bandit cells, a refit every 1,000 steps, ``--reps`` repetitions): UCB-E, PULSE and ``select``'s
  default (``pulse_hedged`` with betting sequences), compile and run timed apart, each in a fresh
  process (``bench_scale.py``'s child), with peak host RSS and peak device memory.
* **Where PULSE's time goes**: PULSE and Naive-Pooling without the periodic refit, and PULSE and
  UCB-E without it at four sizes (models x examples), so the per-step cost that grows with the
  models is apart from the refits'.
* **One compiled step**: instructions, fusions and while/conditional regions in the optimized
  HLO of one UCB-E step and one PULSE step (``Kernel.step`` compiled alone).
* **Sweeps**: ``bench_sweep.py``'s 24-point sweep against 24 cold ``simulate`` calls.
* The backend, its devices, JAX / jaxlib / Python versions.

    python benchmarks/speed/accelerator_report.py --out docs/benchmarks/accelerator.json
    python benchmarks/speed/accelerator_report.py --quick --out /tmp/accelerator.json   # CPU, a few minutes
    python benchmarks/speed/accelerator_report.py --runs full --skip hlo,sweep --reps 100 --out cpu.json   # one part

``--quick`` shrinks every size (250 x 3,008, rank 32, 40,000 bandit cells, 16 repetitions; the
sweep at 20 repetitions per point). Prints a table; writes ``--out`` (JSON) and ``.md`` beside it.
Resumable: measurements already in ``--out`` are kept.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

HERE = Path(__file__).resolve().parent
FACTORS = common.FACTORS
#: Every timed run compiles from scratch: no persistent cache (pulse-jax's or JAX's).
COLD = {**__import__("os").environ, "PULSE_JAX_CACHE": "off", "JAX_ENABLE_COMPILATION_CACHE": "false"}


def environment() -> dict:
    import jax
    import jaxlib

    devices = jax.devices()
    return {"backend": jax.default_backend(), "devices": [str(d.device_kind) for d in devices],
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "cpus": __import__("os").cpu_count()}


def scale_specs(quick: bool, reps: int) -> list[tuple[str, dict]]:
    """``(label, bench_scale child spec)`` for every timed run."""
    full = {"models": 250 if quick else 1000, "examples": 3008 if quick else 12032, "rank": 32 if quick else 100,
            "batch": 64, "bandit_budget": 40_000 if quick else 400_000, "reps": 16 if quick else reps,
            "refit_every": 100 if quick else 1000, "factors": str(FACTORS) if FACTORS.is_file() else None,
            "chunk": None, "banditeval_steps": 0}
    never = 100_000   # longer than any run here: no periodic refit
    out = [(f"full: {m}", {**full, "method": m}) for m in ("ucbe", "pulse", "pulse_hedged+betting")]
    out += [(f"no refit: {m}", {**full, "method": m, "refit_every": never}) for m in ("pulse", "naive")]
    big_m, big_n = full["models"], full["examples"]
    for m, n in ((big_m, big_n), (big_m, big_n // 4), (big_m // 4, big_n), (big_m // 4, big_n // 4)):
        for method in ("pulse", "ucbe"):
            out.append((f"size {m} x {n}: {method}", {**full, "models": m, "examples": n, "method": method,
                                                       "refit_every": never}))
    return out


def timed(spec: dict) -> dict:
    """One ``bench_scale.py`` child run (a fresh process: its own compile, its own peak memory)."""
    proc = subprocess.run([sys.executable, str(HERE / "bench_scale.py"), "--child", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, env=COLD)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {spec}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def step_hlo(quick: bool) -> dict:
    """Instruction, fusion and region counts of one compiled step, per method."""
    import re

    import jax
    import numpy as np

    from pulse_jax import engine

    m, n, r = (250, 3008, 32) if quick else (1000, 12032, 100)
    rng = np.random.default_rng(0)
    scores = (rng.random((m, n)) < 0.5).astype(np.float32)
    V = rng.normal(size=(n, r)).astype(np.float32)
    config = engine.BanditConfig(n_models=m, n_examples=n, budget=m * 64 + 40_000, batch_size=64, refit_every=100)
    out = {}
    for method in ("ucbe", "pulse"):
        kernel = engine.build_kernel(config, engine.Plugins(method))
        params = engine.resolve_params(None, kernel.plugins)
        episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), scores, V, params)
        text = jax.jit(kernel.step).lower(episode, state, params, 1).compile().as_text()
        lines = [ln for ln in text.splitlines() if " = " in ln and not ln.lstrip().startswith(("ROOT", "//"))]
        out[method] = {"instructions": len(lines), "fusions": sum(" fusion(" in ln for ln in lines),
                       "whiles": len(re.findall(r" while\(", text)), "conditionals": len(re.findall(r" conditional\(", text)),
                       "custom_calls": len(re.findall(r" custom-call\(", text))}
    return out


def sweep(quick: bool, workdir: Path) -> dict:
    out = workdir / "sweep.json"
    args = [sys.executable, str(HERE / "bench_sweep.py"), "--out", str(out)] + (["--reps", "20"] if quick else [])
    if subprocess.run(args, env=COLD).returncode != 0:
        raise SystemExit("bench_sweep.py failed")
    return json.loads(out.read_text())


def table(report: dict) -> str:
    lines = [f"Backend: {report['environment']['backend']} ({', '.join(sorted(set(report['environment']['devices'])))}), "
             f"JAX {report['environment']['jax']}", "",
             "| run | models x examples | reps | compile (s) | run (s) | s per rep | peak host (MiB) | peak device (MiB) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label, row in report["runs"].items():
        device = row.get("peak_device_mib")
        lines.append(f"| {label} | {row['models']} x {row['examples']} | {row['reps']} | {row['compile_s']:.1f} | "
                     f"{row['run_s']:.2f} | {row['run_s'] / row['reps']:.3f} | {row['peak_rss_mib']:.0f} | "
                     f"{'' if device is None else f'{device:.0f}'} |")
    runs = report["runs"]
    if "full: pulse" in runs and "full: ucbe" in runs:
        p, u = runs["full: pulse"], runs["full: ucbe"]
        lines += ["", f"PULSE / UCB-E at full scale: run {p['run_s'] / u['run_s']:.1f}x, compile "
                      f"{p['compile_s'] / u['compile_s']:.1f}x (targets: 4x and 2x)."]
    if "hlo" in report:
        lines += ["", "| one compiled step | instructions | fusions | while loops | conditionals | custom calls |",
                  "|---|---:|---:|---:|---:|---:|"]
        for method, c in report["hlo"].items():
            lines.append(f"| {method} | {c['instructions']} | {c['fusions']} | {c['whiles']} | {c['conditionals']} | "
                         f"{c['custom_calls']} |")
    if "sweep" in report:
        rows = report["sweep"].get("rows", {})
        if "sweep" in rows and "separate_cold" in rows:
            s, c = rows["sweep"], rows["separate_cold"]
            lines += ["", f"Sweep: {s['seconds']:.1f} s ({s.get('compile_seconds', 0):.1f} s compiling) against "
                          f"{c['seconds']:.1f} s for the cold calls: {c['seconds'] / s['seconds']:.1f}x "
                          "(targets: 15x on a GPU, 8x on 2 CPU cores)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, out="docs/benchmarks/accelerator.json")
    p.add_argument("--quick", action="store_true", help="small sizes (CPU, a few minutes)")
    p.add_argument("--reps", type=int, default=500, help="repetitions of the full-scale runs")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: runs, hlo, sweep")
    p.add_argument("--runs", default="", help="comma-separated run groups to time (default: all): full, no refit, size")
    args = p.parse_args(argv)
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.is_file() else {}
    report["environment"] = environment()
    report.setdefault("runs", {})
    skip = set(filter(None, args.skip.split(",")))

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))
        out.with_suffix(".md").write_text(table(report) + "\n")

    if "hlo" not in skip and "hlo" not in report:
        report["hlo"] = step_hlo(args.quick)
        save()
    groups = tuple(filter(None, args.runs.split(",")))
    if "runs" not in skip:
        for label, spec in scale_specs(args.quick, args.reps):
            if label not in report["runs"] and (not groups or label.startswith(groups)):
                report["runs"][label] = timed(spec)
                print(f"{label}: compile {report['runs'][label]['compile_s']:.1f} s, run "
                      f"{report['runs'][label]['run_s']:.2f} s", file=sys.stderr, flush=True)
                save()
    if "sweep" not in skip and "sweep" not in report:
        report["sweep"] = sweep(args.quick, out.parent)
        save()
    save()
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
