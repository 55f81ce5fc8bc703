"""What adaptive example sampling could add to PULSE's proxies: the variance of one draw, by design.

For each candidate of the built-in benchmark, with its ``U`` row fitted to its *full* score row (the
most a sampling design could know about it), predictions ``f = sigmoid(u . v)`` and residuals
``r = S - f`` (lambda = 1), this compares the variance of one draw's AIPW term under

* uniform draws: ``Var_j(r_j)``;
* draws with probability ``q_j`` proportional to the predicted residual standard deviation
  ``sqrt(f_j (1 - f_j))``, mixed half and half with uniform (so ``q_j >= 1 / (2 n)``), weighted by
  ``1 / (n q_j)``: ``sum_j r_j^2 / (n^2 q_j) - mean(r)^2``,

both as fractions of the raw scores' variance ``Var_j(S_j)``, with the example embeddings fitted on
the train split and, as a ceiling, in sample. Medians over the 40 candidates.

    python benchmarks/statistics/adaptive_sampling_oracle.py --out docs/benchmarks/adaptive_sampling_oracle.json
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import pulse_jax as pj
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def fit_row(scores: np.ndarray, V: np.ndarray, l2: float = 0.01, steps: int = 50) -> np.ndarray:
    """The L2-penalized logistic regression of one model's scores on the embeddings (Newton's method)."""
    u = np.zeros(V.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-V @ u))
        gradient = V.T @ (p - scores) / len(scores) + l2 * u
        hessian = (V * (p * (1 - p))[:, None]).T @ V / len(scores) + l2 * np.eye(V.shape[1])
        u -= np.linalg.solve(hessian, gradient)
    return u


def variance_ratios(S: np.ndarray, V: np.ndarray, mix: float = 0.5) -> dict:
    n = S.shape[1]
    uniform, adaptive = [], []
    for row in S.astype(np.float64):
        f = 1.0 / (1.0 + np.exp(-V @ fit_row(row, V)))
        r = row - f
        sd = np.sqrt(f * (1 - f))
        q = mix * sd / sd.sum() + (1 - mix) / n
        uniform.append(r.var() / row.var())
        adaptive.append((np.sum(r * r / (n * n * q)) - r.mean() ** 2) / row.var())
    return {"uniform": float(np.median(uniform)), "adaptive": float(np.median(adaptive))}


def main() -> None:
    parser = common.parser(__doc__, out=None)
    args = parser.parse_args()
    bench = pj.make_benchmark(seed=0)
    rows = {"train split": np.asarray(pj.fit_example_embeddings(bench.train, rank=8), np.float64),
            "in sample": np.asarray(pj.fit_example_embeddings(np.vstack([bench.train, bench.scores]), rank=8),
                                    np.float64)}
    result = {name: variance_ratios(bench.scores, V) for name, V in rows.items()}
    lines = ["| embeddings | uniform draws | adaptive draws | cut |", "|---|---:|---:|---:|"]
    for name, r in result.items():
        lines.append(f"| {name} | {r['uniform']:.3f} | {r['adaptive']:.3f} | {100 * (1 - r['adaptive'] / r['uniform']):.0f}% |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps(result, indent=2))
        out.with_suffix(".md").write_text("Variance of one draw's AIPW term as a fraction of the raw scores', median "
                                          "over the built-in benchmark's 40 candidates (`python benchmarks/"
                                          f"adaptive_sampling_oracle.py --out {args.out}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
