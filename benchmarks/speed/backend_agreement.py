"""Same seeds on two backends: run, save, compare.

Runs UCB-E, PULSE and Naive-Pooling on the built-in benchmark (or a factor
file) on whatever backend JAX picks (``JAX_PLATFORMS=cpu`` forces the CPU) and
saves every repetition's choices, best guesses and final estimates. ``--compare``
then reports, per method, the fraction of steps whose pulled model and best
guess agree and the largest difference of the final estimates and radii.

    JAX_PLATFORMS=cpu python benchmarks/speed/backend_agreement.py --out cpu.npz
    python benchmarks/speed/backend_agreement.py --out gpu.npz --follow cpu.npz   # on the accelerator
    python benchmarks/speed/backend_agreement.py --compare cpu.npz gpu.npz --json agreement.json

The engine's arithmetic is float32 everywhere; the backends differ in the
order of reductions (and in fused kernels), so estimates agree to float32
rounding *until* two models' indices come within that rounding of each other
and a pull goes the other way. After such a flip the two runs are different
(equally valid) sample paths. The comparison therefore reports the first step
at which each repetition diverges, and compares estimates only over
repetitions that never diverged.

``--follow A.npz`` also runs every method along A's choices (``simulate(...,
follow=...)``: same seeds, same pulls), so the two backends compute the same
sample path; ``--compare`` then reports the largest difference of every
step's estimates, lambdas and confidence bounds over *all* repetitions.
That is the float tolerance within which the backends agree.
"""
from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def run(args) -> int:
    import jax

    import pulse_jax as pj
    from pulse_jax.simulation import simulate

    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    # V from a file (fitted once, on one backend) so that only the bandit runs differ.
    V = np.load(args.V) if args.V else np.asarray(pj.fit_example_embeddings(bench.train, rank=8))
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * 16 + args.bandit_budget, batch_size=16,
                             refit_every=25)
    out = {"backend": np.array(jax.default_backend()), "device": np.array(str(jax.devices()[0])),
           "jax": np.array(jax.__version__), "V": V}
    config = dataclasses.replace(config, record_estimates=True)   # every step's estimates and bounds
    leader = np.load(args.follow) if args.follow else None
    for method in args.methods.split(","):
        res = simulate(bench.scores, config, method, V=V, reps=args.reps, seed=args.seed)
        for field in ("chosen", "best", "estimates", "radius", "n_obs"):
            out[f"{method}_{field}"] = getattr(res, field)
        for field in ("step_estimates", "step_low", "step_high", "lam"):
            out[f"{method}_{field}"] = getattr(res, field)
        print(f"{method}: {args.reps} repetitions in {res.seconds:.1f} s on {jax.default_backend()}", file=sys.stderr)
        if leader is not None:
            led = simulate(bench.scores, config, method, V=V, reps=args.reps, seed=args.seed,
                           follow=leader[f"{method}_chosen"])
            for field in ("chosen", "step_estimates", "step_low", "step_high", "lam"):
                out[f"{method}_followed_{field}"] = getattr(led, field)
    np.savez(args.out, **out)
    return 0


def _max_diff(a, b):
    """Largest |a - b| over entries where either is a number (NaN on both sides: no value)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    if (np.isnan(a) != np.isnan(b)).any():
        return float("inf")
    d = np.abs(a - b)[~both_nan]
    return float(d.max()) if d.size else 0.0


def compare(a_path, b_path, json_out=None) -> int:
    a, b = np.load(a_path), np.load(b_path)
    rows = {"a": {"backend": str(a["backend"]), "device": str(a["device"]), "jax": str(a["jax"])},
            "b": {"backend": str(b["backend"]), "device": str(b["device"]), "jax": str(b["jax"])},
            "V_max_abs_diff": float(np.abs(a["V"] - b["V"]).max()), "methods": {}}
    methods = sorted({k.split("_")[0] for k in a.files if k.endswith("_chosen")})
    for method in methods:
        ca, cb = a[f"{method}_chosen"], b[f"{method}_chosen"]
        same = ca == cb
        diverged = ~same.all(axis=1)
        first = np.where(diverged, np.argmin(same, axis=1), ca.shape[1])
        keep = ~diverged
        est = np.abs(a[f"{method}_estimates"] - b[f"{method}_estimates"])[keep]
        rad = np.abs(a[f"{method}_radius"] - b[f"{method}_radius"])[keep]
        rows["methods"][method] = {
            "reps": int(ca.shape[0]), "steps": int(ca.shape[1]),
            "reps_identical_choices": int(keep.sum()),
            "step_choices_agree": float(same.mean()),
            "best_guess_agree": float((a[f"{method}_best"] == b[f"{method}_best"]).mean()),
            "median_first_divergence_step": float(np.median(first[diverged])) if diverged.any() else None,
            "max_abs_estimate_diff_identical_reps": float(np.nanmax(est)) if est.size else None,
            "max_abs_radius_diff_identical_reps": float(np.nanmax(rad)) if rad.size else None,
        }
        if f"{method}_followed_chosen" in b.files:   # B followed A's choices: one sample path, every repetition
            row = rows["methods"][method]
            row["followed_path_choices_equal"] = bool(np.array_equal(b[f"{method}_followed_chosen"], ca))
            for field in ("step_estimates", "step_low", "step_high", "lam"):
                row[f"followed_max_abs_{field}_diff"] = _max_diff(a[f"{method}_{field}"], b[f"{method}_followed_{field}"])
    print(json.dumps(rows, indent=2))
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def main(argv=None) -> int:
    p = common.parser(__doc__, out="agreement.npz", reps=100, seed=0, methods="ucbe,pulse,naive")
    p.add_argument("--bandit-budget", type=int, default=6400)
    p.add_argument("--V", help="example embeddings (.npy) to use instead of fitting them here")
    p.add_argument("--follow", metavar="A.npz", help="also run along the choices saved in A.npz (same seeds)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    p.add_argument("--json")
    args = p.parse_args(argv)
    return compare(*args.compare, args.json) if args.compare else run(args)


if __name__ == "__main__":
    sys.exit(main())
