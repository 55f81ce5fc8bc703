"""How good are a candidate's predictions after its first batches, and would a train-split prior help?

At the paper's scale (a factor file from ``../shared/data``: the paper's difficulty subset of 1,000
candidates, the train half for stage 0, rank 100), each candidate observes ``k`` random batches of
64 cells (k = 1, 2, 4). Its row ``u_i`` is then fitted four ways, ``V`` the stage-0 embeddings:

* **engine**: what the bandit does at initialization, ``init_refit_epochs`` (50) Adam steps at
  ``init_refit_lr`` (0.01) from zero on the paper's objective (``factorization.refit_rows``);
* **ridge, converged**: the same objective solved to convergence (Newton; L2 towards 0);
* **train prior, converged**: MAP under a Gaussian prior with the mean and covariance of the train
  models' stage-0 rows, ``sum_cells BCE + (1/2) (u - mean)^T Cov^-1 (u - mean)`` (Newton);
* **oracle**: the true probabilities (the factor file's own rows and embeddings).

Per candidate, on its *unobserved* cells, the fraction of the raw variance left in one draw's AIPW
term: with lambda = 1, ``Var(S - f) / Var(S)``, and with the best lambda, ``1 - corr(S, f)^2``.
Medians over all candidates and over the 20 best (where a bandit spends most of its cells). Each
finished data set is kept in ``--out``, so an interrupted run resumes.

    python benchmarks/statistics/prior_from_train.py --out docs/benchmarks/prior_from_train.json
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.stats import factorization
from pulse_jax.fileio import data
from pulse_jax.engine.params import BanditParams
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

FILES = {"bbh_composite": "openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz",
         "mmlu_pro": "openllm_v2_mmlu_pro_factors.npz"}
SHARED = common.SHARED


def newton_rows(scores, mask, V, mean, precision, steps: int = 25):
    """Per row, ``argmin sum_{observed} BCE + (1/2) (u - mean)^T precision (u - mean)`` by Newton's method."""
    def one(s, obs):
        w_obs = obs.astype(jnp.float32)

        def step(u, _):
            p = jax.nn.sigmoid(V @ u)
            grad = V.T @ (w_obs * (p - s)) + precision @ (u - mean)
            hess = (V * (w_obs * p * (1 - p))[:, None]).T @ V + precision
            return u - jnp.linalg.solve(hess, grad), None

        u, _ = jax.lax.scan(step, mean, None, length=steps)
        return u
    return jax.jit(jax.vmap(one))(scores, mask)


def left_over(S, f, unseen):
    """Per row: ``(Var(S - f) / Var(S), 1 - corr(S, f)^2)`` over the row's unseen cells."""
    at_one, best = [], []
    for s, p, u in zip(S, f, unseen):
        s, p = s[u], p[u]
        var = s.var()
        if var == 0:
            continue
        at_one.append((s - p).var() / var)
        c = np.corrcoef(s, p)[0, 1] if p.std() > 0 else 0.0
        best.append(1 - c * c)
    return np.asarray(at_one), np.asarray(best)


def measure(name, args) -> list[dict]:
    path = Path(args.data_dir) / FILES[name]
    train, cand, info = data.paper_scale_problem(path, seed=args.seed, n_candidates=args.candidates,
                                                 delta_top2=args.delta)
    S = cand.scores.astype(np.float64)
    m, n = S.shape
    U_train, V = factorization.fit(jax.random.PRNGKey(args.seed), jnp.asarray(train.scores),
                                   jnp.ones(train.scores.shape, bool), args.rank,
                                   factorization.adam_settings(args.stage0_epochs, 0.05, 0.01))
    U_train, V = np.asarray(U_train, np.float64), np.asarray(V, np.float64)
    mean, cov = U_train.mean(axis=0), np.cov(U_train, rowvar=False)
    precision = np.linalg.inv(cov + 1e-6 * np.eye(args.rank))
    U_true, V_true = data.load_factors(path)
    rows = [int(c.split("-")[1]) for c in cand.models]
    oracle = 1 / (1 + np.exp(-(U_true[rows].astype(np.float64) @ V_true.T.astype(np.float64))))
    top = np.argsort(-S.mean(axis=1))[:20]
    params = BanditParams()
    out = []
    rng = np.random.default_rng(args.seed)
    order = np.argsort(rng.random((m, n)), axis=1)        # each candidate's draw order
    for k in (1, 2, 4):
        seen = np.zeros((m, n), bool)
        np.put_along_axis(seen, order[:, :64 * k], True, axis=1)
        settings = factorization.FitSettings(50, float(params.init_refit_l2),
                                             factorization.optax.adam(float(params.init_refit_lr)))
        U_engine = factorization.refit_rows(jnp.zeros((m, args.rank), jnp.float32), jnp.asarray(V, jnp.float32),
                                            jnp.asarray(S, jnp.float32), jnp.asarray(seen), settings)
        # The paper's objective's L2 in the units of a sum over cells: (l2 n_obs / (m + n)) ||u||^2 / 2.
        ridge = float(params.init_refit_l2) * seen.sum() / (m + n) * np.eye(args.rank)
        f32 = lambda a: jnp.asarray(a, jnp.float32)   # noqa: E731
        fits = {"engine (50 Adam steps)": np.asarray(U_engine, np.float64),
                "ridge, converged": np.asarray(newton_rows(f32(S), jnp.asarray(seen), f32(V), f32(np.zeros(args.rank)),
                                                           f32(ridge)), np.float64),
                "train prior, converged": np.asarray(newton_rows(f32(S), jnp.asarray(seen), f32(V), f32(mean),
                                                                 f32(precision)), np.float64)}
        preds = {label: 1 / (1 + np.exp(-(U @ V.T))) for label, U in fits.items()}
        preds["oracle (true probabilities)"] = oracle
        for label, f in preds.items():
            at_one, best = left_over(S, f, ~seen)
            top_one, top_best = left_over(S[top], f[top], ~seen[top])
            out.append({"data": name, "batches": k, "fit": label,
                        "lambda1_all": float(np.median(at_one)), "best_lambda_all": float(np.median(best)),
                        "lambda1_top20": float(np.median(top_one)), "best_lambda_top20": float(np.median(top_best))})
            print(out[-1], flush=True)
    return out


def table(rows) -> str:
    lines = ["| data | batches seen | fit of u_i | all 1,000: lambda = 1 | all: best lambda | 20 best: lambda = 1 "
             "| 20 best: best lambda |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['batches']} | {r['fit']} | {r['lambda1_all']:.3f} | "
                     f"{r['best_lambda_all']:.3f} | {r['lambda1_top20']:.3f} | {r['best_lambda_top20']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    p = common.parser(__doc__, delta=0.01, rank=100, seed=0, out=None)
    p.add_argument("--data-dir", default=str(SHARED))
    p.add_argument("--datasets", default="bbh_composite,mmlu_pro")
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--stage0-epochs", type=int, default=300)
    args = p.parse_args()
    start = time.time()
    out = Path(args.out) if args.out else None
    rows = json.loads(out.read_text())["rows"] if out and out.is_file() else []
    for name in args.datasets.split(","):
        if any(r["data"] == name for r in rows):     # kept from an earlier, interrupted run
            continue
        rows += measure(name, args)
        if out:
            out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    text = table(rows)
    print(text)
    print(f"{time.time() - start:.0f} s", file=sys.stderr)
    if out:
        command = " ".join(["python benchmarks/statistics/prior_from_train.py"] + sys.argv[1:])
        out.with_suffix(".md").write_text(
            "Fraction of one draw's raw variance left in the AIPW term, on each candidate's unobserved cells, "
            f"medians (`{command}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
