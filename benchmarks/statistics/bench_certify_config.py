"""Which confidence-sequence configuration certifies the best model in the fewest cells.

On the live example (the built-in benchmark, 40 x 1,000; delta = 0.05, the whole matrix allowed, stop
when certified; one compiled program per method and rule, the same seeds everywhere, so every
comparison is paired) and, with ``--data``, on CRUXEval-O and ChemBench from ``../shared/data``
(split into train and candidate halves as in ``bench_rules.py``), this sweeps, for UCB-E, PULSE
(raw and proxy sequences intersected), PULSE with the proxy sequence alone and ``pulse_certify``
(lambda fixed at 1/2, the proxy sequence alone), under LUCB and Top-Two (interval challenger):

* ``cs_horizon``: the bets' schedule, anytime (0) or tuned to ``t0`` draws per model;
* ``cs_simultaneous``: 1, every bound of every model at once; 0, the certification guarantee only
  (each upper bound at ``delta / (2 C)`` on its own; ``docs/confidence.md``);
* with ``--grids 0,1000``, the family of the sequences (``BanditConfig.cs_grid``): empirical Bernstein
  (0) or betting on 1,000 grid means, with the betting sequence's paired saving over the other.

and reports the median cells to certify, how often it certified, how often wrongly, and how often the
event behind each guarantee failed over the run (all bounds at once; the lower bounds and the best
model's upper bound). PULSE's saving is paired: the median over repetitions of ``1 - cells_PULSE /
cells_UCB-E`` with a bootstrap 95% interval, beside the ratio of the medians.

    python benchmarks/statistics/bench_certify_config.py --reps 200 --out docs/benchmarks/certify_config.json
    python benchmarks/statistics/bench_certify_config.py --reps 200 --data builtin,cruxeval_o,chembench \
        --rules top_two --horizons 0,0.5 --simultaneous 0,1 --out docs/benchmarks/certify_config_data.json

    python benchmarks/statistics/bench_certify_config.py --reps 200 --data builtin,cruxeval_o,chembench --rules top_two \
        --horizons 0 --simultaneous 0 --grids 0,1000 --methods ucbe,pulse_certify \
        --out docs/benchmarks/certify_betting.json

A horizon below 1 is a fraction of the examples (0.5: half of them, 500 on the live example).

``--lambdas 0,0.25,0.5,0.75,1`` instead sweeps lambda, fixed, for PULSE with the proxy sequence
alone under Top-Two (interval), certification bounds and anytime bets: the best fixed lambda per
data set is the *oracle lambda* of the decomposition, beside UCB-E and ``pulse_certify`` (1/2)::

    python benchmarks/statistics/bench_certify_config.py --reps 200 --data builtin,cruxeval_o,chembench \
        --lambdas 0,0.25,0.5,0.75,1 --out docs/benchmarks/certify_lambda.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path


import pulse_jax as pj
from pulse_jax.analysis import metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402
from common import datasets, train_priors  # noqa: E402


METHODS = {"ucbe": "ucbe", "pulse": pj.pulse(), "pulse_proxy_only": pj.pulse(raw_sequence=False),
           "pulse_certify": pj.pulse_certify(), "pulse_hedged": pj.pulse_hedged(),
           "pulse_hedged_prior": pj.pulse_hedged(), "pulse_adaptive": pj.pulse_adaptive(),
           "pulse_adaptive_uniform": pj.pulse_adaptive(1.0)}
LABELS = {"pulse": "PULSE", "pulse_proxy_only": "PULSE, proxy sequence alone",
          "pulse_certify": "pulse_certify (lambda 1/2, proxy sequence alone)",
          "pulse_hedged": "pulse_hedged (lambda 1/2, raw and proxy sequences)",
          "pulse_hedged_prior": "pulse_hedged, refits under the train prior (MAP rows)",
          "pulse_adaptive": "pulse_adaptive (adaptive example sampling, Des Raj proxies)",
          "pulse_adaptive_uniform": "pulse_adaptive(1.0) (the same proxies, uniform draws)"}
RULES = {"lucb": ("LUCB", "lucb"), "top_two": ("Top-Two (interval)", pj.top_two(challenger="interval"))}


def paired_saving(method, baseline) -> dict:
    """``metrics.paired_certify_savings`` (2,000 paired resamples) as fractions: ``saving`` and its ``ci95``."""
    saved = metrics.paired_certify_savings(method, baseline, n_boot=2000, seed=0)
    return {"saving": saved["savings_pct"] / 100, "ci95": [saved["low"] / 100, saved["high"] / 100]}


def main() -> None:
    parser = common.parser(__doc__, reps=200, data="builtin", out=None)
    parser.add_argument("--rules", default="lucb,top_two")
    parser.add_argument("--horizons", default="0,100,300,500,800")
    parser.add_argument("--simultaneous", default="1,0")
    parser.add_argument("--lambdas", default=None, help="sweep a fixed lambda instead (see above)")
    parser.add_argument("--grids", default="0",
                        help="BanditConfig.cs_grid values: 0, the empirical-Bernstein sequences; G > 0, betting "
                             "sequences on G grid means")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--challenger", default="interval",
                        help="Top-Two's challenger cost: interval (select's) or interval_symmetric")
    args = parser.parse_args()
    RULES["top_two"] = ("Top-Two (interval)" if args.challenger == "interval" else f"Top-Two ({args.challenger})",
                        pj.top_two(challenger=args.challenger))
    sets = datasets(rank=8)
    priors = train_priors(rank=8) if "pulse_hedged_prior" in args.methods.split(",") else {}
    if args.lambdas:
        return lambda_sweep(sets, args)
    rows, results = [], {}
    for data_name in args.data.split(","):
        scores, V = sets[data_name]
        m, n = scores.shape
        horizons = [float(h) * n if 0 < float(h) < 1 else float(h) for h in args.horizons.split(",")]
        grid = {"cs_horizon": horizons, "cs_simultaneous": [float(s) for s in args.simultaneous.split(",")]}
        for rule_key, cs_grid in itertools.product(args.rules.split(","), [int(g) for g in args.grids.split(",")]):
            rule_name, rule = RULES[rule_key]
            config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25,
                                     cs_grid=cs_grid)
            for method in args.methods.split(","):
                with_prior = method.endswith("_prior")     # the train models' Gaussian, at weight 1
                res = pj.sweep(scores, config, pj.Plugins(METHODS[method], rule, "certified"), grid, reps=args.reps, seed=0,
                               V=V if method != "ucbe" else None, progress=False,
                               base=pj.BanditParams(refit_prior=1.0) if with_prior else None,
                               row_prior=priors.get(data_name) if with_prior else None)
                for point, r in zip(res.points, res.results):
                    cert = r.certification()
                    key = (data_name, rule_name, point.cs_horizon, point.cs_simultaneous, cs_grid)
                    results[key + (method,)] = r
                    rows.append({"data": data_name, "rule": rule_name, "method": method, "cs_grid": cs_grid,
                                 "cs_horizon": point.cs_horizon, "cs_simultaneous": point.cs_simultaneous,
                                 "median_cells": cert["median_cells"], "certified_fraction": cert["certified_fraction"],
                                 "errors": cert["errors"], "all_bounds_failed": 1.0 - r.anytime_coverage(),
                                 "certification_event_failed": 1.0 - r.certification_coverage()})
                    print(rows[-1], flush=True)
    for row in rows:
        if row["method"] != "ucbe":
            key = (row["data"], row["rule"], row["cs_horizon"], row["cs_simultaneous"], row["cs_grid"])
            row.update(paired_saving(results[key + (row["method"],)], results[key + ("ucbe",)]))
    text = table(rows)
    betting = betting_table(rows, results)
    if betting:
        text += "\n\nThe betting sequence against the empirical-Bernstein one (same method, rule, bounds and bets):\n\n" + betting
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows}, indent=2))
        command = " ".join(["python benchmarks/statistics/bench_certify_config.py"] + sys.argv[1:])
        out.with_suffix(".md").write_text(
            f"{args.reps} paired repetitions per cell; every repetition certified: "
            f"{all(r['certified_fraction'] == 1.0 for r in rows)}; wrong certifications: "
            f"{sum(r['errors'] for r in rows)} in all; the certification event failed in at most "
            f"{max(r['certification_event_failed'] for r in rows):.3f} of the repetitions of any row "
            f"(`{command}`)\n\n{text}\n")


def lambda_sweep(sets, args) -> None:
    """Median cells to certify with lambda fixed at each value (PULSE, proxy sequence alone), paired with UCB-E."""
    lambdas = [float(v) for v in args.lambdas.split(",")]
    rows = []
    for data_name in args.data.split(","):
        scores, V = sets[data_name]
        m, n = scores.shape
        config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25)
        top_two = RULES["top_two"][1]
        base = pj.BanditParams(cs_simultaneous=0.0)
        ucbe = pj.simulate(scores, config, pj.Plugins("ucbe", top_two, "certified"), reps=args.reps, seed=0, params=base, progress=False)
        swept = pj.sweep(scores, config, pj.Plugins(pj.pulse(raw_sequence=False), top_two, "certified"), {"fixed_lambda": lambdas}, reps=args.reps,
                         seed=0, V=V, base=base, progress=False)
        for lam, r in zip(lambdas, swept.results):
            cert = r.certification()
            rows.append({"data": data_name, "lambda": lam, "median_cells": cert["median_cells"],
                         "ucbe_median_cells": ucbe.certification()["median_cells"], "errors": cert["errors"],
                         **paired_saving(r, ucbe)})
            print(rows[-1], flush=True)
    lines = ["| data | lambda | UCB-E | PULSE, proxy sequence alone | saves (paired 95% CI) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['lambda']:g} | {r['ucbe_median_cells']:,.0f} | {r['median_cells']:,.0f} | "
                     f"{100 * r['saving']:.0f}% [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}] |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows}, indent=2))
        command = " ".join(["python benchmarks/statistics/bench_certify_config.py"] + sys.argv[1:])
        out.with_suffix(".md").write_text(f"{args.reps} paired repetitions per cell; Top-Two (interval), certification "
                                          f"bounds, anytime bets; wrong certifications: "
                                          f"{sum(r['errors'] for r in rows)} in all (`{command}`)\n\n{text}\n")


def _sequence(row) -> str:
    return "empirical Bernstein" if row.get("cs_grid", 0) == 0 else f"betting ({row['cs_grid']} grid means)"


def table(rows) -> str:
    """One line per (data, rule, sequence, bounds, horizon, PULSE variant): UCB-E's cells, the variant's, the saving."""
    lines = ["| data | rule | sequence | bounds | horizon t0 | UCB-E | method | cells | saves vs UCB-E (paired 95% CI) |",
             "|---|---|---|---|---:|---:|---|---:|---:|"]
    same = lambda r, u: all(r.get(k, 0) == u.get(k, 0) for k in ("data", "rule", "cs_horizon", "cs_simultaneous",  # noqa: E731
                                                                 "cs_grid"))
    for u in (r for r in rows if r["method"] == "ucbe"):
        bounds = "all at once" if u["cs_simultaneous"] == 1 else f"certification (s = {u['cs_simultaneous']:g})"
        horizon = "anytime" if u["cs_horizon"] == 0 else f"{u['cs_horizon']:g}"
        for r in rows:
            if r["method"] == "ucbe" or not same(r, u):
                continue
            lines.append(f"| {u['data']} | {u['rule']} | {_sequence(u)} | {bounds} | {horizon} | "
                         f"{u['median_cells']:,.0f} | {LABELS[r['method']]} | {r['median_cells']:,.0f} | "
                         f"{100 * r['saving']:.0f}% [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}] |")
    return "\n".join(lines)


def betting_table(rows, results) -> str:
    """Per method and setting with both sequences: the betting sequence's paired saving over the empirical-Bernstein one."""
    lines = ["| data | rule | bounds | horizon t0 | method | empirical Bernstein | betting | betting saves (paired 95% CI) |",
             "|---|---|---|---:|---|---:|---:|---:|"]
    for r in rows:
        if r.get("cs_grid", 0) == 0:
            continue
        key = (r["data"], r["rule"], r["cs_horizon"], r["cs_simultaneous"])
        base = results.get(key + (0, r["method"]))
        if base is None:
            continue
        saved = paired_saving(results[key + (r["cs_grid"], r["method"])], base)
        r["saving_vs_empirical_bernstein"] = [saved["saving"], *saved["ci95"]]
        label = "UCB-E" if r["method"] == "ucbe" else LABELS[r["method"]]
        bounds = "all at once" if r["cs_simultaneous"] == 1 else "certification"
        horizon = "anytime" if r["cs_horizon"] == 0 else f"{r['cs_horizon']:g}"
        lines.append(f"| {r['data']} | {r['rule']} | {bounds} | {horizon} | {label} | "
                     f"{base.certification()['median_cells']:,.0f} | {r['median_cells']:,.0f} | "
                     f"{100 * saved['saving']:.0f}% [{100 * saved['ci95'][0]:.0f}, {100 * saved['ci95'][1]:.0f}] |")
    return "\n".join(lines) if len(lines) > 2 else ""


if __name__ == "__main__":
    main()
