"""How much slack the confidence sequences have: ever-miss rates against their guarantees.

Every model's sequence must cover its mean at every look with probability >= 1 - delta,
simultaneously over the models (each of the 2 m C one-sided sequences runs at
alpha = delta / (2 m C); `docs/confidence.md`). This measures, over ``--reps`` repetitions:

* ``any_miss``: the fraction of repetitions in which *any* model's interval *ever* missed
  (guarantee: <= delta);
* ``seq_miss``: per sequence kind (UCB-E: raw scores; PULSE: raw scores, AIPW proxies), the
  fraction of (repetition, model) pairs in which that sequence on its own ever missed, against
  its own guarantee 2 alpha (two sides): the ratio says how conservative each sequence is;

at delta = 0.2 and 0.5, for UCB-E and for PULSE with good, useless (V = 0: every prediction
1/2) and adversarial (sign-flipped V) predictions, binary and soft scores. A rate far below its
bound means room for narrower valid intervals (e.g. a betting confidence sequence).

The ``certify_*`` cases run ``select``'s default interval: UCB-E and ``pulse_certify`` (one
sequence, on the AIPW proxies with lambda 1/2) at certification levels (``cs_simultaneous = 0``).
There the guarantees are the certification event's (every lower bound and the best model's upper
bound, at every look: ``cert_event_miss <= delta``) and each model's own interval's
(``own_miss <= delta``), and each upper sequence runs at ``delta / (2 C)``. The ``betting_*`` cases
run the same with betting sequences (``cs_grid = 1000``); ``betting_hedged_*`` is ``select``'s
default (``pulse_hedged``: lambda 1/2, raw and proxy capitals summed, certification levels).

    python benchmarks/statistics/cs_slack.py --reps 1000 --out docs/benchmarks/cs_slack.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import pulse_jax as pj
from pulse_jax.stats.confidence import BETTING_GRID
from pulse_jax.engine.params import BanditParams
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

CASES = ("ucbe", "pulse_good", "pulse_useless", "pulse_adversarial", "pulse_soft", "certify_ucbe",
         "certify_good", "certify_useless", "certify_adversarial", "certify_soft", "betting_ucbe",
         "betting_pulse_adversarial", "betting_certify_ucbe", "betting_hedged_good", "betting_hedged_useless",
         "betting_hedged_adversarial", "betting_hedged_soft")


def problem(case: str, models: int, examples: int):
    bench = pj.make_benchmark(seed=4, n_models=models, n_examples=examples, n_train=60)
    scores = bench.scores.astype(np.float32)
    if case.endswith("_soft"):
        noise = np.random.default_rng(1).random(scores.shape)
        scores = np.clip(scores * 0.7 + noise * 0.3, 0, 1).astype(np.float32)
    V = None
    if not case.endswith("ucbe"):
        V = pj.fit_example_embeddings(bench.train, rank=3)
        V = 0.0 * V if case.endswith("_useless") else -3.0 * V if case.endswith("_adversarial") else V
    return scores, V


def method_of(case: str):
    """``(estimator, cs_simultaneous, cs_grid)`` of a case (``betting_*``: betting sequences, 1,000 grid means)."""
    grid = BETTING_GRID if case.startswith("betting_") else 0
    case = case.removeprefix("betting_")
    if case.startswith("hedged_"):
        return pj.pulse_hedged(), 0.0, grid
    if case.startswith("certify_"):
        return ("ucbe" if case == "certify_ucbe" else pj.pulse_certify()), 0.0, grid
    return ("ucbe" if case == "ucbe" else "pulse"), 1.0, grid


def simultaneous_of(case: str) -> float:
    return method_of(case)[1]


def measure(case: str, delta: float, reps: int, models: int, examples: int, batch: int, bandit_cells: int) -> dict:
    scores, V = problem(case, models, examples)
    method, simultaneous, grid = method_of(case)
    config = pj.BanditConfig(n_models=models, n_examples=examples, budget=models * batch + bandit_cells,
                             batch_size=batch, refit_every=5, cs_grid=grid)
    start = time.perf_counter()
    res = pj.simulate(scores, config, method, V=V, reps=reps, seed=11,
                      params=BanditParams(delta=delta, cs_simultaneous=simultaneous), progress=False)
    seconds = time.perf_counter() - start
    seq = res.cs_sequence_covers()                             # (R, m, C)
    n_seq = seq.shape[-1]
    alpha = delta / (2 * models * n_seq)
    names = ["raw"] if method == "ucbe" else ["proxy"] if n_seq == 1 else ["raw", "proxy"]
    any_miss = 1.0 - res.anytime_coverage()
    se = float(np.sqrt(max(any_miss * (1 - any_miss), 1e-12) / reps))
    return {"case": case, "delta": delta, "reps": reps, "models": models, "examples": examples,
            "any_miss": any_miss, "any_miss_se": se, "guarantee": delta,
            "cert_event_miss": 1.0 - res.certification_coverage(),
            "own_miss": float((1.0 - res.cs_covers().mean(axis=0)).max()),
            "seq_miss": {name: float(1.0 - seq[..., c].mean()) for c, name in enumerate(names)},
            "seq_guarantee": 2 * alpha, "seconds": round(seconds, 2)}


def main() -> None:
    parser = common.parser(__doc__, reps=1000, models=5, out=None)
    parser.add_argument("--deltas", default="0.2,0.5")
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--bandit-cells", type=int, default=120)
    args = parser.parse_args()
    rows = [measure(case, float(d), args.reps, args.models, args.examples, args.batch, args.bandit_cells)
            for d in args.deltas.split(",") for case in CASES]
    lines = ["| case | delta | any model ever missed | certification event failed | worst model's own miss | "
             "raw sequence ever missed | proxy sequence ever missed | each sequence's bound (2 alpha) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        raw, proxy = r["seq_miss"].get("raw"), r["seq_miss"].get("proxy")
        bound = "" if simultaneous_of(r["case"]) == 0 else f"{r['seq_guarantee']:.4f}"
        lines.append(f"| {r['case']} | {r['delta']:g} | {r['any_miss']:.3f} +- {r['any_miss_se']:.3f} | "
                     f"{r['cert_event_miss']:.3f} | {r['own_miss']:.3f} | {'' if raw is None else f'{raw:.4f}'} | "
                     f"{'' if proxy is None else f'{proxy:.4f}'} | "
                     f"{bound} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
        out.with_suffix(".md").write_text(
            f"{args.reps} repetitions, {args.models} models x {args.examples} examples, B = {args.batch}, "
            f"{args.bandit_cells} bandit cells, refit every 5 steps "
            f"(`python benchmarks/statistics/cs_slack.py --reps {args.reps} --out {args.out}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
