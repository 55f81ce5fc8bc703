"""Where the cells go when certifying the best model, and what better predictions or lambda would save.

Stop when certified, delta = 0.05, the whole matrix allowed, the same seeds for every row. Per
configuration: the median cells to certify, and how they split between the two best models (which
must be told apart) and the others (which must only be excluded). On the live example (the built-in
benchmark, 40 x 1,000), under LUCB and Top-Two (interval challenger), with every bound at once:

* UCB-E and PULSE; PULSE with lambda fixed at 1 (no adaptive shrinkage);
* PULSE with *in-sample* predictions: example embeddings fitted on the train models *and* the
  candidates' full score matrix (predictions no honest run can have: a ceiling for what better
  predictions could give);

and with certification bounds (``cs_simultaneous = 0``): UCB-E, PULSE, ``pulse_certify`` and
``pulse_certify`` with in-sample predictions. With ``--data``, the same certification rows under
Top-Two for CRUXEval-O and ChemBench (shipped with the package, `pulse_jax.datasets`; split into train and
candidate halves).

Beside them, the fixed-time oracle of ``benchmarks/statistics/oracle_variance.py --live`` (known variances,
perfect allocation, Bernstein's bound: no anytime-valid sequence can need fewer cells).

    python benchmarks/statistics/decompose_savings.py --reps 200 --data builtin,cruxeval_o,chembench \
        --out docs/benchmarks/decompose.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import pulse_jax as pj
from pulse_jax.engine.params import BanditParams
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

ORACLE = common.RESULTS / "intervals" / "oracle_live_example.json"


def cells_to_top_two(res) -> dict:
    """Median cells (at the run's end: the certificate, or the budget) to the two best models, to the
    rest, and the median share of the two best."""
    order = np.argsort(-res.true_means)
    top2 = res.n_obs[:, order[:2]].sum(axis=1)
    total = res.n_obs.sum(axis=1)
    return {"median_top2_cells": float(np.median(top2)), "median_other_cells": float(np.median(total - top2)),
            "median_top2_share": float(np.median(top2 / total))}


def split_cells(res) -> dict:
    """Median cells to certify and how they split between the two best models and the rest."""
    cert = res.certification()
    return {"certified_fraction": cert["certified_fraction"], "errors": cert["errors"],
            "median_cells": cert["median_cells"], **cells_to_top_two(res)}


def _runs(V, V_in_sample):
    """``name -> (estimator, V, params)`` of one rule's rows."""
    certification = BanditParams(cs_simultaneous=0.0)
    return {"all at once": {"UCB-E": ("ucbe", None, None), "PULSE": ("pulse", V, None),
                            "PULSE, lambda = 1": ("pulse", V, {"estimator.fixed_lambda": 1.0}),
                            "PULSE, in-sample predictions": ("pulse", V_in_sample, None)},
            "certification": {"UCB-E": ("ucbe", None, certification), "PULSE": ("pulse", V, certification),
                              "pulse_certify": ("pulse_certify", V, certification),
                              "pulse_certify, in-sample predictions": ("pulse_certify", V_in_sample, certification)}}


def _data(names):
    """``name -> (scores, V, V fitted in sample)``: the built-in benchmark and the real matrices split as in
    ``bench_rules.py``."""
    out = {}
    for name in names:
        if name == "builtin":
            bench = pj.make_benchmark(seed=0)
            scores, train = bench.scores, bench.train
        else:
            train_matrix, cand = common.real_split(name)
            scores, train = cand.scores, train_matrix.scores
        out[name] = (scores, pj.fit_example_embeddings(train, rank=8),
                     pj.fit_example_embeddings(np.vstack([train, scores]), rank=8))
    return out


def main() -> None:
    parser = common.parser(__doc__, reps=200, data="builtin", out=None)
    args = parser.parse_args()
    rules = {"LUCB": "lucb", "Top-Two (interval)": "top_two_interval"}
    rows = []
    for data_name, (scores, V, V_in_sample) in _data(args.data.split(",")).items():
        m, n = scores.shape
        for rule_name, rule in rules.items():
            config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25)
            for bounds, runs in _runs(V, V_in_sample).items():
                if data_name != "builtin" and (bounds == "all at once" or rule_name == "LUCB"):
                    continue     # the real matrices: the recommended rule and bounds only
                for name, (method, embeddings, params) in runs.items():
                    res = pj.simulate(scores, config, pj.Plugins(method, rule, "certified"), V=embeddings, reps=args.reps, seed=0, params=params,
                                      progress=False)
                    rows.append({"data": data_name, "rule": rule_name, "bounds": bounds, "configuration": name,
                                 "models": m, **split_cells(res)})
                    print(rows[-1], flush=True)
    oracle = json.loads(ORACLE.read_text()) if ORACLE.is_file() else None
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows, "fixed_time_oracle": oracle}, indent=2))
        command = " ".join(["python benchmarks/statistics/decompose_savings.py"] + sys.argv[1:])
        out.with_suffix(".md").write_text(f"{args.reps} paired repetitions per row (`{command}`)\n\n{text}\n")


def table(rows) -> str:
    base = {(r["data"], r["rule"], r["bounds"]): r["median_cells"] for r in rows if r["configuration"] == "UCB-E"}
    lines = ["| data | rule | bounds | configuration | median cells to certify | saves vs UCB-E | to the two best "
             "| to the others |", "|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        saved = 100 * (1 - r["median_cells"] / base[(r["data"], r["rule"], r["bounds"])])
        lines.append(f"| {r['data']} | {r['rule']} | {r['bounds']} | {r['configuration']} | "
                     f"{r['median_cells']:,.0f} | {'' if r['configuration'] == 'UCB-E' else f'{saved:.0f}%'} | "
                     f"{r['median_top2_cells']:,.0f} | {r['median_other_cells']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
