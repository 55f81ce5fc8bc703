"""Money: cost-aware sampling against the cost-blind rule, and the certificates about cost.

Parts (``--parts``, default all; each result is kept in ``--out`` as it finishes, so a rerun resumes):

* ``exact``: ``select``'s configuration (``pulse_hedged``, Top-Two with the interval challenger,
  certification bounds, betting sequences on 1,000 grid means, batch 8, stop when certified, budget =
  every cell) on the built-in benchmark (``pj.make_benchmark(seed=0)``, 40 x 1,000, embeddings at rank
  16 from its train split), with one model at 10x the others' price: the leader, then the runner-up.
  The cost-blind rule (no ``cost=``; its money is ``sum_i n_obs_i c_i``) against the same rule given
  the costs, ``--reps`` paired repetitions: median money to certify and the paired saving.
* ``floor``: the fewest cells the 10x model can get (the same rule with it at 1,000x), and from it the
  most money any rule could save at 10x.
* ``tables``: the same comparison on the real matrices under ../shared/data with two price tables
  each (`price_tables`: list prices of API models where the name is one, otherwise cost proportional
  to the parameter count in the name), and at equal prices (the choices must not change).
* ``cost``: ``cheapest_within(0.01)`` and ``cost_front(0.01)`` (rule ``focus``, every bound at once:
  ``cs_simultaneous = 1``) on those problems: certified fraction within the whole matrix, wrong
  claims against the full-matrix truth, money as a share of evaluating every cell, beside the money
  of certifying the exact best with ``when_certified`` at the same levels.
* ``core``: ``cost_front(0.01)`` on the models of its tight relations alone (`tight_core`): what the
  rule cannot avoid paying on the whole matrix, as a share of its money.

    python benchmarks/statistics/bench_cost.py --out docs/benchmarks/cost.json
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

#: Approximate list prices, dollars per million output tokens (2024), by a piece of the model's name.
#: The first piece found in a name prices it (so the more specific pieces come first).
LIST_PRICES = (("o1-preview", 60.0), ("o1-mini", 12.0), ("gpt-4o-mini", 0.6), ("chatgpt-4o", 15.0),
               ("gpt-4o", 10.0), ("gpt-4-turbo", 30.0), ("gpt-4-0314", 60.0), ("gpt-3.5", 1.5),
               ("claude-3-5-sonnet", 15.0), ("claude-3-opus", 75.0), ("claude-3-sonnet", 15.0),
               ("claude-3-haiku", 1.25), ("gemini-1.5-pro", 5.0), ("gemini-1.5-flash", 0.3),
               ("deepseek", 0.28), ("Mistral-Large", 6.0), ("reka-core", 15.0), ("reka-flash", 0.8),
               ("yi-large", 3.0), ("claude-3.5", 15.0), ("claude-3 (opus)", 75.0), ("claude-2", 24.0),
               ("gpt-4", 60.0), ("gemini-pro", 1.5), ("command-r+", 15.0), ("paperqa", 30.0), ("o1", 60.0))
#: Dollars per million output tokens per billion parameters, for open models priced by size.
PER_BILLION = 0.02


def parameter_count(name: str) -> float | None:
    """The billions of parameters in a model's name (``8x7B`` counts 56), or None."""
    hit = re.search(r"(\d+)x(\d+(?:\.\d+)?)[Bb]\b", name)
    if hit:
        return float(hit.group(1)) * float(hit.group(2))
    hit = re.search(r"(\d+(?:\.\d+)?)[Bb]\b", name.replace("-", " "))
    return float(hit.group(1)) if hit else None


def price_tables(names) -> dict[str, np.ndarray]:
    """``table -> (m,) price`` for the models ``names``: "list prices" (an API model's list price, an open
    model's size x PER_BILLION), and "parameters" (proportional to the parameter count; an API model
    without one is priced as the largest open model). Models without either keep the median price."""
    sizes = np.array([parameter_count(n) or np.nan for n in names])
    listed = np.array([next((p for k, p in LIST_PRICES if k.lower() in n.lower()), np.nan) for n in names])
    by_size = np.where(np.isnan(sizes), np.nanmax(sizes) if np.isfinite(sizes).any() else 1.0, sizes)
    prices = np.where(np.isnan(listed), sizes * PER_BILLION, listed)
    prices = np.where(np.isnan(prices), np.nanmedian(prices), prices)
    return {"list prices": prices, "parameters": by_size / by_size.min()}


def select_config(m: int, n: int):
    import pulse_jax as pj

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000, cs_grid=1000,
                           record_steps=False)


def select_plugins(stop="certified", rule="top_two_interval"):
    """PULSE (hedged) with ``rule`` and ``stop``: `select`'s plug-ins for a certificate."""
    import pulse_jax as pj

    return pj.Plugins("pulse_hedged", rule, stop)


def problems(rank: int = 16):
    """``name -> (scores, V, names)``: the built-in benchmark and the real matrices present (rank capped by
    the train split)."""
    import pulse_jax as pj

    out = {}
    bench = pj.make_benchmark(seed=0)
    out["builtin"] = (bench.scores, np.asarray(pj.fit_example_embeddings(bench.train, rank=rank)),
                      [f"model {i}" for i in range(bench.scores.shape[0])])
    for name in common.REAL_FILES:
        split = common.real_split(name)
        if split is not None:
            train, cand = split
            r = min(rank, *train.scores.shape)    # ChemBench's split has 11 train models
            out[name] = (cand.scores, np.asarray(pj.fit_example_embeddings(train.scores, rank=r)), list(cand.models))
    return out


def _certify(scores, V, reps, cost=None, **kw):
    import pulse_jax as pj

    m, n = scores.shape
    res = pj.simulate(scores, select_config(m, n), select_plugins(**kw), V=V, reps=reps, seed=0, cost=cost,
                      params={"cs_simultaneous": 0.0}, progress=False)
    return res


def _money(res, cost):
    return (res.n_obs * np.asarray(cost)[None, :]).sum(1)


def _compare(scores, V, cost, reps, blind=None) -> dict:
    """Cost-blind against cost-aware money to certify the exact best, paired."""
    start = time.perf_counter()
    blind = blind if blind is not None else _certify(scores, V, reps)
    aware = _certify(scores, V, reps, cost=cost)
    a, b = _money(aware, cost), _money(blind, cost)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, reps, (1000, reps))
    saved = 100 * (1 - np.median(a[draws], 1) / np.median(b[draws], 1))
    best = int(np.argmax(scores.mean(1)))
    return {"reps": reps, "blind_median_money": float(np.median(b)), "aware_median_money": float(np.median(a)),
            "saving_pct": float(100 * (1 - np.median(a) / np.median(b))),
            "saving_low": float(np.quantile(saved, 0.025)), "saving_high": float(np.quantile(saved, 0.975)),
            "same_choices": bool(np.array_equal(blind.n_obs, aware.n_obs)),
            "wrong_certificates": int(((aware.certified_model >= 0) & (aware.certified_model != best)).sum()),
            "certified": int((aware.certified_model >= 0).sum()), "seconds": round(time.perf_counter() - start, 1)}


def part_exact(reps: int, done: dict, save) -> None:
    scores, V, _ = problems()["builtin"]
    order = np.argsort(-scores.mean(1))
    blind = None
    for who, label in ((0, "leader"), (1, "runner-up")):
        key = f"exact | builtin | {label} at 10x"
        if key in done:
            continue
        blind = blind if blind is not None else _certify(scores, V, reps)
        cost = np.ones(scores.shape[0])
        cost[order[who]] = 10.0
        done[key] = _compare(scores, V, cost, reps, blind)
        save()
        print(f"{key}: saving {done[key]['saving_pct']:+.1f}%", file=sys.stderr)


def part_floor(reps: int, done: dict, save) -> None:
    """How few cells the 10x model can get: the same rule with that model at 1,000x (its pulls all but
    avoided), and the most money any rule could then save at 10x if nothing else grew:
    ``(blind cells - floor cells) x 9 / blind money``."""
    scores, V, _ = problems()["builtin"]
    order = np.argsort(-scores.mean(1))
    blind = _certify(scores, V, reps)
    for who, label in ((0, "leader"), (1, "runner-up")):
        key = f"floor | builtin | {label}"
        if key in done:
            continue
        model = order[who]
        cost = np.ones(scores.shape[0])
        cost[model] = 1000.0
        floor = _certify(scores, V, reps, cost=cost)
        at_10 = np.where(np.arange(scores.shape[0]) == model, 10.0, 1.0)
        blind_money = float(np.median(_money(blind, at_10)))
        done[key] = {"reps": reps, "blind_cells": float(blind.n_obs[:, model].mean()),
                     "floor_cells": float(floor.n_obs[:, model].mean()), "blind_money_at_10x": blind_money,
                     "floor_money_at_10x": float(np.median(_money(floor, at_10))),
                     "largest_saving_pct": float(100 * 9 * (blind.n_obs[:, model].mean() - floor.n_obs[:, model].mean())
                                                 / blind_money)}
        save()
        print(f"{key}: {done[key]}", file=sys.stderr)


def part_tables(reps: int, done: dict, save) -> None:
    for name, (scores, V, names) in problems().items():
        if name == "builtin":
            continue
        blind = None
        tables = {**price_tables(names), "equal": np.ones(len(names))}
        for table, cost in tables.items():
            key = f"exact | {name} | {table}"
            if key in done:
                continue
            blind = blind if blind is not None else _certify(scores, V, reps)
            done[key] = {**_compare(scores, V, cost, reps, blind), "span": float(cost.max() / cost.min()),
                         "prices": dict(zip(names, map(float, cost)))}
            save()
            print(f"{key}: saving {done[key]['saving_pct']:+.1f}%", file=sys.stderr)


def priced_problems():
    """``(name, table, scores, V, names, cost, full)`` for every problem and price table of the
    certificates about cost: the real matrices' `price_tables`, the built-in benchmark's leader at
    10x; ``full`` is the money of evaluating every observed cell."""
    for name, (scores, V, names) in problems().items():
        tables = price_tables(names) if name != "builtin" else {"leader at 10x": _leader_10x(scores)}
        for table, cost in tables.items():
            full = float(np.nansum(np.where(np.isnan(scores), 0.0, 1.0) * cost[:, None]))
            yield name, table, scores, V, names, cost, full


def part_cost(reps: int, done: dict, save) -> None:
    import pulse_jax as pj

    for name, table, scores, V, _, cost, full in priced_problems():
        m, n = scores.shape
        for stop in ("cheapest_within", "cost_front", "certified"):
            key = f"cost | {name} | {table} | {stop}"
            if key in done:
                continue
            rule = getattr(pj, stop)(0.01) if stop != "certified" else "certified"
            start = time.perf_counter()
            res = pj.simulate(scores, select_config(m, n),
                              select_plugins(stop=rule, rule="focus" if stop != "certified" else "top_two_interval"),
                              V=V, reps=reps, seed=0, cost=cost, params={"cs_simultaneous": 1.0},
                              progress=False)
            claims = res.claims()
            money = res.money[:, -1]
            done[key] = {"reps": reps, "stopped_fraction": claims["stopped_fraction"], "errors": claims["errors"],
                         "median_money_share": float(np.median(money) / full),
                         "max_money_share": float(money.max() / full), "seconds": round(time.perf_counter() - start, 1)}
            save()
            print(f"{key}: {done[key]}", file=sys.stderr)


#: A front relation closer than this to the epsilon line counts as tight (``part_core``).
TIGHT = 0.035


def tight_core(mu, cost, epsilon: float = 0.01) -> list[int]:
    """The models of the front's tight relations: each model ``i`` and the best model at most as
    expensive, ``b``, whenever ``|mu_b - mu_i - epsilon| < TIGHT``. Placing ``i`` needs its bound and
    ``b``'s to be that close to the truth: dominated needs ``L_b > U_i + epsilon`` (no other model at
    most as expensive has more room), on the front ``U_b <= L_i + epsilon``."""
    keep = set()
    for i in range(len(mu)):
        rivals = [j for j in range(len(mu)) if j != i and cost[j] <= cost[i]]
        if rivals:
            b = max(rivals, key=lambda j: mu[j])
            if abs(mu[b] - mu[i] - epsilon) < TIGHT:
                keep |= {i, b}
    return sorted(keep)


def part_core(reps: int, done: dict, save) -> None:
    """``cost_front(0.01)`` on the models of its tight relations alone (`tight_core`), same rule and
    prices, as a share of the whole matrix's money. The sub-problem is easier than the whole one (fewer
    models to place, fewer models at most as expensive to clear, bounds split over fewer models), so
    its money is what the rule cannot avoid paying on the whole matrix."""
    import pulse_jax as pj

    for name, table, scores, V, names, cost, full in priced_problems():
        n = scores.shape[1]
        key = f"core | {name} | {table}"
        if key in done:
            continue
        core = tight_core(np.nanmean(scores, 1), cost)
        if len(core) < 2:        # no tight relation: nothing the rule must pay for
            done[key] = {"reps": reps, "models": [], "median_money_share": 0.0, "cells": []}
            save()
            continue
        sub, sub_cost = scores[core], cost[core]
        res = pj.simulate(sub, select_config(len(core), n), select_plugins(stop=pj.cost_front(0.01), rule="focus"),
                          V=V, reps=reps, seed=0, cost=sub_cost, params={"cs_simultaneous": 1.0}, progress=False)
        done[key] = {"reps": reps, "models": [names[i] for i in core],
                     "stopped_fraction": res.claims()["stopped_fraction"],
                     "median_money_share": float(np.median(res.money[:, -1]) / full),
                     "cells": [float(c) for c in res.n_obs.mean(0)]}
        save()
        print(f"{key}: {done[key]}", file=sys.stderr)


def _leader_10x(scores):
    cost = np.ones(scores.shape[0])
    cost[int(np.argmax(np.nanmean(scores, 1)))] = 10.0
    return cost


PARTS = {"exact": part_exact, "floor": part_floor, "tables": part_tables, "cost": part_cost, "core": part_core}


def _amount(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def table(done: dict) -> str:
    lines = ["Exact best, cost-blind against cost-aware (median money to certify, paired saving with its 95% "
             "bootstrap interval):", "",
             "| problem | prices | blind | aware | saving | same choices | wrong |", "|---|---|---:|---:|---:|---|---:|"]
    for key, row in done.items():
        if key.startswith("exact"):
            _, problem, prices = (part.strip() for part in key.split("|"))
            lines.append(f"| {problem} | {prices} | {_amount(row['blind_median_money'])} | {_amount(row['aware_median_money'])} "
                         f"| {row['saving_pct']:+.1f}% [{row['saving_low']:+.1f}, {row['saving_high']:+.1f}] "
                         f"| {row['same_choices']} | {row['wrong_certificates']} |")
    floors = [(k, r) for k, r in done.items() if k.startswith("floor")]
    if floors:
        lines += ["", "The 10x model's fewest cells (the same rule with it at 1,000x) and the most any rule could save "
                  "at 10x:", "", "| problem | model at 10x | its cells, blind | its fewest cells | most saving |",
                  "|---|---|---:|---:|---:|"]
        for key, row in floors:
            _, problem, who = (part.strip() for part in key.split("|"))
            lines.append(f"| {problem} | {who} | {row['blind_cells']:.0f} | {row['floor_cells']:.0f} | "
                         f"{row['largest_saving_pct']:.1f}% |")
    lines += ["", "Certificates about cost (money as a share of evaluating every cell; wrong claims against the "
              "full-matrix truth):", "",
              "| problem | prices | certificate | certified | median share | largest share | wrong |",
              "|---|---|---|---:|---:|---:|---:|"]
    for key, row in done.items():
        if key.startswith("cost"):
            _, problem, prices, stop = (part.strip() for part in key.split("|"))
            lines.append(f"| {problem} | {prices} | {stop} | {row['stopped_fraction']:.0%} | "
                         f"{row['median_money_share']:.1%} | {row['max_money_share']:.1%} | {row['errors']} |")
    cores = [(k, r) for k, r in done.items() if k.startswith("core")]
    if cores:
        lines += ["", "`cost_front(0.01)` on its tight relations alone (each model and the best model at most as "
                  f"expensive, when that pair lies within {TIGHT} of the epsilon line), as a share of the whole "
                  "matrix's money:", "", "| problem | prices | models | median share |", "|---|---|---|---:|"]
        for key, row in cores:
            _, problem, prices = (part.strip() for part in key.split("|"))
            lines.append(f"| {problem} | {prices} | {', '.join(row['models'])} | {row['median_money_share']:.1%} |")
    return "\n".join(lines)


def main() -> None:
    p = common.parser(__doc__, reps=100, out=str(common.RESULTS / "cost.json"))
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts: " + ", ".join(PARTS))
    args = p.parse_args()
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {}

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(done, indent=1) + "\n")
        out.with_suffix(".md").write_text(table(done) + "\n")

    for part in args.parts.split(","):
        PARTS[part](args.reps, done, save)
    print(table(done))


if __name__ == "__main__":
    main()
