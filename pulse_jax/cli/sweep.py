"""``pulse-jax sweep``: every (grid point, repetition) pair of one method as one compiled program."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pulse_jax.cli.inputs import costs_of, one_side_information, side_information
from pulse_jax.cli.options import BUILTIN_BANDIT_CELLS, HelpFormatter, add_cost_option, add_input_options, add_run_options, bandit_config, check_param_options, check_run_args, for_method, numbers_of, parse_methods, plugin_option, resolve_defaults, rule_and_stop, run_budget
from pulse_jax.cli.output import check_out_dir, hash_inputs, say_missing, say_ties, simulation_progress
from pulse_jax.errors import require


def add(sub) -> None:
    sw = sub.add_parser("sweep", formatter_class=HelpFormatter,
                        help="a hyperparameter sweep of one method as one compiled program",
                        description="Every (grid point, repetition) pair of one method as one compiled program.")
    add_input_options(sw, scores_required=False)
    add_cost_option(sw)
    sw.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="a swept parameter and its values (repeat for a Cartesian product); NAME is an engine "
                         "number (delta, init_refit_lr, init_refit_l2, refit_lr, refit_l2, cs_horizon, "
                         "cs_simultaneous, refit_prior) or a plug-in's, by path or by its field name alone: "
                         "rule.exploration, estimator.fixed_lambda (nan = the paper's adaptive lambda), "
                         "rule.leader_fraction, stop.epsilon, ...")
    sw.add_argument("--target", type=float, default=0.95,
                    help="accuracy target of the printed table and the figure (0.9 and 0.95 are always in the JSON)")
    sw.add_argument("--baseline", default=None, metavar="NAME=V,...",
                    help="the point savings are measured against (default: every swept number at its default when the grid has "
                         "it, else the point with the highest accuracy over the run)")
    add_run_options(sw, reps=200, one_method=True,
                     budget_help="total cells, initialization included (default: initialization + "
                                 f"{BUILTIN_BANDIT_CELLS:,} on the built-in benchmark, 25%% of all cells on a file)")
    sw.add_argument("--out", required=True, help="results directory (sweep.json, sweep.csv, sweep.png, provenance)")


def run(args) -> None:
    check_run_args(args)
    require(0 < args.target < 1, f"--target must lie in (0, 1), got {args.target}")
    resolve_defaults(args, "built-in" if args.scores is None else "file")
    check_out_dir(args.out, args.force)
    methods = parse_methods(args.method, args)
    require(len(methods) == 1, f"--method: a sweep runs one method, got {', '.join(methods)}")
    (method, estimator), = methods.items()
    plugins = (estimator, plugin_option("sampling rule", args.rule, "--rule"), plugin_option("stopping rule", args.stop, "--stop"))
    grid, baseline = _sweep_grid(args, plugins)
    check_param_options(args, [plugins])
    scores, names, title, default_budget, V, inputs, examples = _sweep_data(args, method, estimator)
    cost = costs_of(args, names, examples, scores)
    m, n = scores.shape
    config = bandit_config(args, m, n, run_budget(args, m, n, default_budget))
    plugins = for_method(config, estimator, rule_and_stop(args), alone=True)
    points = int(np.prod([len(values) for values in grid.values()]))
    print(title)
    print(f"sweep of {method}: {points} points x {args.reps} repetitions = {points * args.reps:,} runs as one "
          f"program; budget {config.budget:,} cells, batch {config.batch_size}, refit every {config.refit_every}")
    if points > LARGE_SWEEP:
        print(f"pulse-jax: {points:,} points x {args.reps} repetitions = {points * args.reps:,} runs: this can take a "
              f"long time (Ctrl-C stops it); the table below shows the {SHOWN_ROWS} best points, sweep.csv holds "
              "every one", file=sys.stderr)
    from pulse_jax.sweeps import sweep

    result = sweep(scores, config, plugins, grid, args.reps, args.seed, V=V, base=numbers_of(args, config, plugins),
                   baseline=baseline, chunk_size=args.chunk_size, progress=simulation_progress(args, "sweep"),
                   model_names=names, cost=cost)
    targets = tuple(sorted({0.9, 0.95, args.target}))
    rows = result.table(targets)
    say_ties(result.results[0])
    print(result.format_table(_shown(rows, args.target), target=args.target))
    if len(rows) > SHOWN_ROWS:
        print(f"({SHOWN_ROWS} of {len(rows):,} points: the baseline and the best by cells to the target; every point "
              "is in sweep.csv)")
    shown = ", ".join(f"{k}={v:g}" if v is not None else f"{k}=nan" for k, v in result.values(result.baseline).items())
    print(f"the cells are compared with point {result.baseline} ({shown}): {result.baseline_reason}")
    paths = result.write(args.out, targets, figure_target=args.target, rows=rows, inputs=inputs)
    print(f"{points} points x {args.reps} repetitions in {result.seconds:.1f} s (of which compilation "
          f"{result.compile_seconds:.1f} s, once)")
    print(f"results: {paths['json']}  {paths['csv']}  figure: {paths.get('figure')}")


#: A sweep with more points than this says so before it runs, and prints `SHOWN_ROWS` rows.
LARGE_SWEEP, SHOWN_ROWS = 1000, 20


def _sweep_grid(args, plugins) -> tuple[dict, dict | None]:
    """``--grid`` and ``--baseline`` as ``({name: values}, {name: value} or None)``."""
    from pulse_jax.engine.params import parse_grid_option

    from pulse_jax.engine.params import run_params

    require(args.grid, "--grid: give at least one, e.g. --grid exploration=0.25,0.5,1,2")
    grid = {}
    for text in args.grid:
        name, values = parse_grid_option(text)
        require(name not in grid, f"--grid {name}: given twice")
        for value in values:   # the name is one of this run's numbers, each value in its range
            run_params(plugins, {name: value}, f"--grid {name}")
        grid[name] = values
    if not args.baseline:
        return grid, None
    baseline = {}
    for item in args.baseline.split(","):
        name, sep, value = item.partition("=")
        require(sep, f"--baseline: expected NAME=VALUE[,NAME=VALUE], got {args.baseline!r}")
        name = name.strip()
        baseline[name] = float(parse_grid_option(f"{name}={value}")[1][0])
        run_params(plugins, {name: baseline[name]}, f"--baseline {name}")   # a number of this run, in range
    return grid, baseline


def _sweep_data(args, method, estimator):
    """``(scores, model names, title, default budget, V, input files, example ids)`` of a sweep."""
    from pulse_jax import synthetic
    from pulse_jax.fileio import data

    one_side_information(args)
    inputs = hash_inputs(args.scores, args.train, args.embeddings, getattr(args, "hparams", None))
    if args.scores is None:
        require(not (args.train or args.embeddings), "--train/--embeddings need --scores (the built-in benchmark "
                                                     "brings its own train split)")
        bench = synthetic.make_benchmark(seed=args.seed)
        m = bench.scores.shape[0]
        from pulse_jax.stats import factorization

        V = factorization.fit_example_embeddings(bench.train, rank=args.rank, seed=args.seed) \
            if estimator.uses_predictions else None
        default_budget = m * args.batch_size * args.init_batches + BUILTIN_BANDIT_CELLS
        return bench.scores, bench.models, bench.description, default_budget, V, (), bench.examples
    cand = data.handle_missing(data.load(args.scores), args.missing)
    say_missing(cand)
    m, n = cand.shape
    V = None
    if estimator.uses_predictions:
        require(args.train or args.embeddings, f"--method {method} needs side information: pass --train FILE or "
                                               "--embeddings FILE (or use --method ucbe)")
        V = side_information(args, cand, n)
    return (cand.scores, cand.models, f"{Path(args.scores).name}: {m} models x {n} examples",
            max(m * args.batch_size * args.init_batches, (m * n) // 4), V, inputs, cand.examples)


def _shown(rows: list[dict], target: float) -> list[dict]:
    """All rows of a small sweep; of a large one, the baseline and the best by cells to the target."""
    if len(rows) <= SHOWN_ROWS:
        return rows
    key = f"budget_to_{target * 100:g}"
    ranked = sorted((r for r in rows if not r["baseline"]),
                    key=lambda r: (r[key] is None, r[key] if r[key] is not None else 0, -r["accuracy"]))
    return [r for r in rows if r["baseline"]] + ranked[:SHOWN_ROWS - 1]
