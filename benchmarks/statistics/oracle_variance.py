"""How much variance can predictions remove on the paper-scale data? (Lemma 2's ``rho^2``.)

PULSE's one-step variance is at most ``(1 - rho_i^2)`` times UCB-E's, ``rho_i`` the
correlation between model i's scores and the predictions over its examples
(Lemma 2). On the factor files the cells are Bernoulli draws from known
probabilities ``p_ij = sigmoid(u_i . v_j)``, so the *oracle* predictor ``f = p``
is the best any factorization can do, and its ``rho_i^2 = var_j(p_ij) /
var_j(S_ij)`` bounds what PULSE can save. Printed for the top models of the
candidate half (the ones a best-model search spends its cells on)::

    python benchmarks/statistics/oracle_variance.py --data ../shared/data --out docs/paper_full/oracle_variance.json
    python benchmarks/statistics/oracle_variance.py --achieved --out docs/paper_full/achieved_rho2.json
    python benchmarks/statistics/oracle_variance.py --achieved --cells 64 --epochs 50 --lr 0.01 \\
        --out docs/paper_full/achieved_rho2_paper_init_refit.json      # what the bandit has until step 1,000
    python benchmarks/statistics/oracle_variance.py --live --out docs/benchmarks/intervals/oracle_live_example.json

``--live`` answers #9's question for the README's live example (built-in
benchmark, 40 x 1,000, delta = 0.05): the residual variance the predictions
reach there, and the cells an *oracle* needs to certify the best model. The
oracle knows every model's variance and allocates cells perfectly; its
per-model interval is Bernstein's with known variance and the
without-replacement factor, ``w(n) = sqrt(2 sigma^2 L (1 - (n-1)/N) / n) + b L / (3 n)``,
``L = log(2 m / delta)`` (simultaneous over models and sides, not anytime:
a lower bound for any anytime-valid sequence), and a CLT width
``z_{1 - delta/(2m)} sigma sqrt((1 - (n-1)/N) / n)`` for comparison. It pays
the initialization batch (64 cells per model) like the bandit does.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

FILES = {"mmlu_pro": "openllm_v2_mmlu_pro_factors.npz",
         "bbh_composite": "openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz"}


def main(argv=None) -> int:
    p = common.parser(__doc__, out="results/oracle_live_example.json", rank=16, delta=0.05)
    p.add_argument("--data", default=str(common.SHARED))
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args(argv)
    from pulse_jax.fileio.data import load_factors

    out = {}
    for name, file in FILES.items():
        U, V = load_factors(Path(args.data) / file)
        rng = np.random.default_rng(0)                      # the reproduction's split (seed 0)
        order = rng.permutation(U.shape[0])
        cand = np.sort(order[U.shape[0] // 2:])
        P = 1 / (1 + np.exp(-(U[cand] @ V.T)))               # (candidates, n) true probabilities
        mean = P.mean(1)
        top = np.argsort(-mean)[:args.top]
        var_p = P[top].var(1)                                # between-example variance of p
        var_s = (P[top] * (1 - P[top])).mean(1) + var_p      # variance of a Bernoulli(p_j) score over j
        rho2 = var_p / var_s
        out[name] = {"top_models": args.top, "mean_accuracy_top": [float(x) for x in mean[top]],
                     "oracle_rho2": [float(x) for x in rho2], "median_oracle_rho2": float(np.median(rho2)),
                     "min_oracle_rho2": float(rho2.min()), "max_oracle_rho2": float(rho2.max())}
        print(f"{name}: top {args.top} candidates, oracle rho^2 median {np.median(rho2):.3f} "
              f"(range {rho2.min():.3f}-{rho2.max():.3f}): at best {np.median(rho2):.0%} less variance per cell",
              file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0




def achieved(args_list=None) -> int:
    """The rho^2 that fitted predictions reach: stage-0 V from the train half (rank 100, the
    reproduction's settings), then each top model's u_i fitted on k of its cells (V frozen, the
    paper's refit objective, 200 Adam steps: past convergence of the 10-epoch refits)."""
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=str(common.SHARED))
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--cells", default="64,256,1024")
    p.add_argument("--epochs", type=int, default=200, help="Adam steps of the u_i fit (paper's initial refit: 50)")
    p.add_argument("--lr", type=float, default=0.05, help="its learning rate (paper's initial refit: 0.01)")
    args = p.parse_args(args_list)
    import jax.numpy as jnp

    from pulse_jax.stats import factorization
    from pulse_jax.fileio import data

    out = {}
    for name, file in FILES.items():
        train, cand, _ = data.paper_scale_problem(Path(args.data) / file, seed=0, n_candidates=1000)
        V = jnp.asarray(factorization.fit_example_embeddings(train.scores, rank=args.rank,
                                                             settings=factorization.adam_settings(300, 0.05, 0.01)))
        S = cand.scores
        top = np.argsort(-S.mean(1))[:args.top]
        rng = np.random.default_rng(1)
        rows = {}
        for k in (int(c) for c in args.cells.split(",")):
            mask = np.zeros((len(top), S.shape[1]), bool)
            for r in range(len(top)):
                mask[r, rng.choice(S.shape[1], k, replace=False)] = True
            U = factorization.refit_rows(jnp.zeros((len(top), args.rank)), V, jnp.asarray(S[top]), jnp.asarray(mask),
                                         factorization.adam_settings(args.epochs, args.lr, 0.01))
            f = np.asarray(factorization.predict(U, V))
            rho2 = np.array([np.corrcoef(S[t], f[r])[0, 1] ** 2 for r, t in enumerate(top)])
            rows[k] = {"median_rho2": float(np.median(rho2)), "min": float(rho2.min()), "max": float(rho2.max())}
            print(f"{name}: u_i fitted on {k} cells ({args.epochs} steps, lr {args.lr}): achieved rho^2 median {np.median(rho2):.3f} "
                  f"(range {rho2.min():.3f}-{rho2.max():.3f})", file=sys.stderr)
        out[name] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


def _oracle_cells(means, variances, N, delta, ranges, init=64, clt=False):
    """Fewest cells (initialization included) after which the best model's interval is
    above every other's, with perfect allocation and known variances (see the module doc)."""
    from statistics import NormalDist

    m = len(means)
    L = np.log(2 * m / delta)
    z = NormalDist().inv_cdf(1 - delta / (2 * m))
    n = np.arange(1, N + 1, dtype=float)

    def width(var, b):
        fpc = np.maximum(1 - (n - 1) / N, 0.0)
        w = z * np.sqrt(var * fpc / n) if clt else np.sqrt(2 * var * L * fpc / n) + b * L / (3 * n)
        w[-1] = 0.0                                      # fully observed: the mean is known
        return w

    best = int(np.argmax(means))
    widths = [width(v, b) for v, b in zip(variances, ranges)]
    total_best = np.inf
    for nb in range(init, N + 1):
        wb = widths[best][nb - 1]
        total = nb
        for i in range(m):
            if i == best:
                continue
            ok = np.nonzero(wb + widths[i] < means[best] - means[i])[0]
            if len(ok) == 0:
                total = np.inf
                break
            total += max(int(ok[0]) + 1, init)
        total_best = min(total_best, total)
    return float(total_best)


def _sequence_vs_oracle(S, delta, draws=512, orders=200):
    """The price of anytime validity on one model: UCB-E's confidence sequence (at the same
    simultaneous level) after ``draws`` uniform draws without replacement, against the oracle's
    fixed-time, known-variance Bernstein half-width at that count."""
    import jax.numpy as jnp

    from pulse_jax.stats import confidence

    m, N = S.shape
    best = S[int(np.argmax(S.mean(1)))]
    log_ia = confidence.cs_log_inv_alpha(delta, m, 1)
    rng = np.random.default_rng(0)
    widths = []
    for _ in range(orders):
        y = jnp.asarray(rng.permutation(best)[:draws], jnp.float32)[None]
        cs = confidence.cs_update(confidence.cs_init(1, 1), 0,
                                  confidence.Draws(jnp.int32(0), jnp.float32(0), jnp.float32(N), y[0], jnp.ones(draws, bool)),
                                  confidence.Observations(y, jnp.zeros_like(y), jnp.ones_like(y)), log_ia)
        widths.append(float(cs.high[0] - cs.low[0]) / 2)
    L = np.log(2 * m / delta)
    fpc = 1 - (draws - 1) / N
    oracle = np.sqrt(2 * best.var() * L * fpc / draws) + L / (3 * draws)
    seq = float(np.median(widths))
    return {"mean": float(best.mean()), "draws": draws, "orders": orders, "sequence_half_width": seq,
            "oracle_half_width": float(oracle), "ratio": seq / float(oracle)}


def live(args_list=None) -> int:
    """Residual variance and oracle cells-to-certify on the live example (see the module doc)."""
    p = argparse.ArgumentParser()
    p.add_argument("--cells", default="64,256,1000")
    args = p.parse_args(args_list)
    import jax.numpy as jnp

    import pulse_jax as pj
    from pulse_jax.stats import factorization

    bench = pj.make_benchmark(seed=0)
    S = np.asarray(bench.scores, float)
    m, N = S.shape
    means, var_raw = S.mean(1), S.var(1)
    V = jnp.asarray(pj.fit_example_embeddings(bench.train, rank=args.rank))
    rng = np.random.default_rng(1)
    out = {"models": m, "examples": N, "delta": args.delta,
           "oracle_cells_ucbe": {"bernstein": _oracle_cells(means, var_raw, N, args.delta, np.ones(m)),
                                 "clt": _oracle_cells(means, var_raw, N, args.delta, np.ones(m), clt=True)},
           "fitted_on": {}}
    out["sequence_vs_oracle_width"] = _sequence_vs_oracle(S, args.delta)
    w = out["sequence_vs_oracle_width"]
    print(f"best model (mean {w['mean']:.3f}) after {w['draws']} of {N} draws: confidence-sequence half-width "
          f"{w['sequence_half_width']:.4f} (median of {w['orders']} orders) vs the oracle's Bernstein "
          f"{w['oracle_half_width']:.4f} ({w['ratio']:.2f}x)", file=sys.stderr)
    print(f"live example {m} x {N}, delta {args.delta}: oracle cells to certify, UCB-E (raw variance): "
          f"Bernstein {out['oracle_cells_ucbe']['bernstein']:,.0f}, CLT {out['oracle_cells_ucbe']['clt']:,.0f}",
          file=sys.stderr)
    for k in (int(c) for c in args.cells.split(",")):
        mask = np.zeros((m, N), bool)
        for r in range(m):
            mask[r, rng.choice(N, k, replace=False)] = True
        U = factorization.refit_rows(jnp.zeros((m, args.rank)), V, jnp.asarray(S, jnp.float32), jnp.asarray(mask),
                                     factorization.adam_settings(200, 0.05, 0.01))
        f = np.asarray(factorization.predict(U, V), float)
        # the variance-minimising lambda in [0, 1] per model, and the residual variance it leaves
        cov = ((S - means[:, None]) * (f - f.mean(1, keepdims=True))).mean(1)
        lam = np.clip(cov / np.maximum(f.var(1), 1e-12), 0.0, 1.0)
        var_res = (S - lam[:, None] * f).var(1)
        ratio = var_res / np.maximum(var_raw, 1e-12)
        top = np.argsort(-means)[:10]
        row = {"median_residual_variance_ratio_top10": float(np.median(ratio[top])),
               "median_rho2_top10": float(np.median(1 - ratio[top])),
               "oracle_cells_pulse": {
                   "bernstein": _oracle_cells(means, var_res, N, args.delta, 1 + lam),
                   "clt": _oracle_cells(means, var_res, N, args.delta, 1 + lam, clt=True)}}
        out["fitted_on"][k] = row
        print(f"  u_i fitted on {k} cells: residual/raw variance (median, top 10) "
              f"{row['median_residual_variance_ratio_top10']:.3f}; oracle cells, PULSE: Bernstein "
              f"{row['oracle_cells_pulse']['bernstein']:,.0f}, CLT {row['oracle_cells_pulse']['clt']:,.0f}",
              file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    modes = {"--achieved": achieved, "--live": live}
    sys.exit(modes[sys.argv[1]](sys.argv[2:]) if sys.argv[1:2] and sys.argv[1] in modes else main())
