"""Command line: ``pulse-jax demo``, ``simulate``, ``sweep``, ``tune`` and ``select``.

Errors in the input print one line (``pulse-jax: error: ...``) and exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from pulse_jax.errors import PulseInputError, require

PLUGIN_HELP = "a registered name or package.module:attribute (a plug-in of your own)"


def _methods(text: str) -> dict:
    """``--method``: comma-separated estimators (names or ``module:attribute``) as ``{name: Estimator}``."""
    from pulse_jax import registry

    items = [m.strip() for m in text.split(",") if m.strip()]
    require(items, "--method: no method given")
    methods = {}
    for item in items:
        key = item if ":" in item else item.lower().replace("-", "")
        estimator = registry.estimator(key, "--method")
        require(estimator.name not in methods, f"--method: {estimator.name!r} given twice")
        methods[estimator.name] = estimator
    return methods


def _plugin(kind: str, value: str, option: str):
    """``--rule`` / ``--stop``: a registered name or ``module:attribute``, resolved before any computation."""
    from pulse_jax import registry

    return registry.resolve(kind, value if ":" in value else value.lower().replace("-", "_"), option)


def _uses_predictions(methods: dict) -> bool:
    return any(e.uses_predictions for e in methods.values())


def _add_run_options(p: argparse.ArgumentParser, *, reps: int, batch: int, refit_every: int, rank: int,
                     budget_help: str):
    p.add_argument("--method", default="ucbe,pulse,naive",
                   help=f"comma-separated estimators: ucbe, pulse, naive, or {PLUGIN_HELP}")
    p.add_argument("--reps", type=int, default=reps, help="repetitions per method")
    p.add_argument("--budget", type=int, default=None, help=budget_help)
    p.add_argument("--batch-size", type=int, default=batch, help="examples per pull (B)")
    p.add_argument("--init-batches", type=int, default=1, help="initial batches per model (T0)")
    p.add_argument("--exploration", type=float, default=1.0, help="UCB-E exploration a")
    p.add_argument("--refit-every", type=int, default=refit_every, help="bandit steps between refits (tau)")
    p.add_argument("--rank", type=int, default=rank, help="factorization rank for the train split")
    p.add_argument("--delta", type=float, default=0.05, help="intervals have coverage 1 - delta")
    p.add_argument("--rule", default="ucbe",
                   help="sampling rule: ucbe (the paper's index), lucb, top_two, successive_halving, or "
                        f"{PLUGIN_HELP}; methods without an interval keep ucbe when the rule needs one")
    p.add_argument("--stop", default="budget",
                   help="stopping rule: budget (spend it all), certified (stop once a model is certified best), "
                        f"or {PLUGIN_HELP}; methods without an interval spend the budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-size", type=int, default=None, help="repetitions per compiled batch")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_stopping_options(sel: argparse.ArgumentParser) -> None:
    sel.add_argument("--no-early-stop", action="store_true", help="spend the whole budget")
    sel.add_argument("--grace", type=float, default=None,
                     help="on SIGINT/SIGTERM, wait at most this many seconds for the batches in flight (default: "
                          "until they finish; a second signal abandons them)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pulse-jax", description=(
        "Find the best model while evaluating a fraction of the (model, example) cells: "
        "PULSE, UCB-E and Naive-Pooling as a vmap-ed JAX simulation."))
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="compare the three methods on the built-in synthetic benchmark")
    _add_run_options(demo, reps=300, batch=16, refit_every=25, rank=8,
                     budget_help="total cells, initialization included (default: init + 6,400)")
    demo.add_argument("--out", default="pulse_demo", help="results directory")

    sim = sub.add_parser("simulate", help="repetitions of one or more methods on your score matrix")
    sim.add_argument("--scores", required=True, help="candidates' scores (.csv or .npz); missing cells allowed")
    sim.add_argument("--missing", default="keep", choices=("keep", "drop-examples", "drop-models"),
                     help="missing candidate cells: keep (each model's benchmark is what it has scores for), "
                          "or drop the examples / the models that have gaps")
    sim.add_argument("--train", default=None, help="historical models' scores on the same examples (side info)")
    sim.add_argument("--embeddings", default=None, help=".npy file with example embeddings V (n x r)")
    sim.add_argument("--hparams", default=None, help="stage-0 settings from `pulse-jax tune` (overrides --rank)")
    _add_run_options(sim, reps=100, batch=64, refit_every=1000, rank=16,
                     budget_help="total cells, initialization included (default: 25%% of all cells)")
    sim.add_argument("--out", required=True, help="results directory (JSON + NPZ + PNG)")

    sw = sub.add_parser("sweep", help="a hyperparameter sweep of one method as one compiled program")
    sw.add_argument("--scores", default=None,
                    help="candidates' scores (.csv or .npz; missing cells allowed) (default: the built-in benchmark)")
    sw.add_argument("--missing", default="keep", choices=("keep", "drop-examples", "drop-models"),
                    help="missing candidate cells: keep, or drop the examples / the models that have gaps")
    sw.add_argument("--train", default=None, help="historical models' scores on the same examples (side info)")
    sw.add_argument("--embeddings", default=None, help=".npy file with example embeddings V (n x r)")
    sw.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="a swept parameter and its values (repeat for a Cartesian product); NAME is one of "
                         "exploration, delta, init_refit_lr, init_refit_l2, refit_lr, refit_l2, fixed_lambda "
                         "(nan = the paper's adaptive lambda)")
    sw.add_argument("--target", type=float, default=0.95,
                    help="accuracy target of the printed table and the figure (0.9 and 0.95 are always in the JSON)")
    sw.add_argument("--baseline", default=None, metavar="NAME=V,...",
                    help="the point savings are measured against (default: the first point)")
    _add_run_options(sw, reps=200, batch=16, refit_every=25, rank=8,
                     budget_help="total cells, initialization included (built-in: init + 6,400; "
                                 "a file: 25%% of all cells)")
    sw.set_defaults(method="pulse")
    sw.add_argument("--out", required=True, help="results directory (sweep.json, sweep.csv, sweep.png)")

    tune = sub.add_parser("tune", help="choose the factorization's hyperparameters by cross-validation (1-SE)")
    tune.add_argument("--train", required=True, help="historical models' scores (CSV/NPZ, missing cells allowed)")
    tune.add_argument("--out", required=True, help="JSON file for `simulate --hparams`")
    tune.add_argument("--ranks", default="4,8,16,32")
    tune.add_argument("--lams", default="0.001,0.01,0.1")
    tune.add_argument("--lrs", default="0.05")
    tune.add_argument("--epochs", default="150,300")
    tune.add_argument("--folds", type=int, default=5)
    tune.add_argument("--seed", type=int, default=0)

    sel = sub.add_parser("select", help="pick the best real model, evaluating batches with your scorer")
    sel.add_argument("--models", required=True, help="text file, one candidate name per line")
    sel.add_argument("--examples", required=True,
                     help="number of examples N (ids 0..N-1), or a text file with one example id per line")
    sel.add_argument("--budget", type=int, required=True, help="total cells, initialization included")
    sel.add_argument("--evaluate", required=True,
                     help="module:function with signature evaluate(model, example_ids) -> scores in [0, 1]")
    sel.add_argument("--log", required=True, help="JSONL log; run the same command again to resume")
    sel.add_argument("--train", default=None, help="historical scores on the same examples (CSV/NPZ)")
    sel.add_argument("--method", default="pulse", help=f"the estimator: pulse, ucbe, naive, or {PLUGIN_HELP}")
    sel.add_argument("--batch-size", type=int, default=64)
    sel.add_argument("--init-batches", type=int, default=1)
    sel.add_argument("--exploration", type=float, default=1.0)
    sel.add_argument("--refit-every", type=int, default=1000)
    sel.add_argument("--rank", type=int, default=16)
    sel.add_argument("--delta", type=float, default=0.05)
    sel.add_argument("--rule", default="ucbe",
                     help=f"sampling rule: ucbe (the paper's index), lucb or top_two (built to certify), or {PLUGIN_HELP}")
    sel.add_argument("--seed", type=int, default=0)
    sel.add_argument("--concurrency", type=int, default=1, help="batches evaluated at once (thread pool)")
    sel.add_argument("--retries", type=int, default=0, help="retries of a failing evaluate call")
    _add_stopping_options(sel)
    sel.add_argument("--report", default=None, help="report directory (default: next to the log)")
    sel.add_argument("--quiet", action="store_true")
    return parser


def _config(args, m: int, n: int, default_budget: int):
    from pulse_jax.bandit import BanditConfig

    budget = args.budget if args.budget is not None else default_budget
    if budget > m * n:
        print(f"note: --budget {budget:,} is more than the matrix's {m * n:,} cells; using {m * n:,}")
        budget = m * n
    require(args.reps >= 1, f"--reps must be >= 1, got {args.reps}")
    require(args.batch_size <= n, f"--batch-size {args.batch_size} is larger than the number of examples ({n})")
    return BanditConfig(n_models=m, n_examples=n, budget=budget, batch_size=args.batch_size,
                        init_batches=args.init_batches, refit_every=args.refit_every,
                        rule=_plugin("sampling rule", args.rule, "--rule"),
                        stop=_plugin("stopping rule", args.stop, "--stop"))


def _for_method(config, estimator):
    """A method without an interval keeps the index rule and spends the budget when the chosen rule or
    stopping rule needs an interval (so it can be compared beside the others)."""
    import dataclasses

    if estimator.has_interval:
        return config
    return dataclasses.replace(config, rule="ucbe" if config.rule.needs_interval else config.rule,
                               stop="budget" if config.stop.needs_interval else config.stop)


def _params(args):
    from pulse_jax.params import BanditParams, check_params

    return check_params(BanditParams(exploration=args.exploration, delta=args.delta), "options")


def _run_all(scores, V, config, methods, args, names):
    from pulse_jax.simulate import simulate

    results = {}
    for name, estimator in methods.items():
        results[name] = simulate(scores, _for_method(config, estimator), estimator, params=_params(args),
                                 V=V if estimator.uses_predictions else None, reps=args.reps,
                                   seed=args.seed, chunk_size=args.chunk_size, progress=not args.quiet,
                                   model_names=names)
    return results


def _say_missing(cand):
    """One line when the candidates' benchmarks are ragged (missing cells kept)."""
    missing = np.isnan(cand.scores)
    if missing.any():
        sizes = (~missing).sum(axis=1)
        print(f"note: {int(missing.sum()):,} of {missing.size:,} candidate cells are missing; each model is judged "
              f"on the examples it has a score for ({sizes.min():,}-{sizes.max():,} per model). "
              "--missing drop-examples or drop-models gives a common example set")


def _say_ties(result):
    """One line when several models tie for the best true mean (a guess of any counts as correct)."""
    if result.n_best > 1:
        names = [result.model_names[i] if result.model_names else f"row {i}" for i in result.best_models]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        print(f"note: {result.n_best} models tie for the best true mean ({shown}); a guess of any of them "
              "counts as correct")


def _finish(results, out, title):
    from pulse_jax import report

    _say_ties(next(iter(results.values())))
    print(report.comparison_table(results))
    paths = report.write_results(results, out, title=title)
    for method, r in results.items():
        print(f"  {method:<6} {r.reps} repetitions in {r.seconds:.1f} s (of which compilation {r.compile_seconds:.1f} s)")
    print(f"results: {paths['summary']}  plot: {paths['plot']}")


def _check_out_dir(path, option="--out") -> None:
    """Before any computation: the results directory must be a directory (or not exist yet)."""
    out = Path(path)
    require(not out.exists() or out.is_dir(), f"{option} {out}: exists and is not a directory")


def cmd_demo(args) -> None:
    from pulse_jax import factorization, synthetic

    _check_out_dir(args.out)
    methods = _methods(args.method)
    bench = synthetic.make_benchmark(seed=args.seed)
    m, n = bench.scores.shape
    config = _config(args, m, n, default_budget=m * args.batch_size * args.init_batches + 6400)
    print(bench.description)
    print(f"budget {config.budget:,} cells ({config.init_cells:,} for initialization), batch {config.batch_size}, "
          f"refit every {config.refit_every} steps, {args.reps} repetitions per method")
    start = time.perf_counter()
    V = factorization.fit_example_embeddings(bench.train, rank=args.rank, seed=args.seed) \
        if _uses_predictions(methods) else None
    if args.chunk_size is None:  # a few chunks so the progress bar moves
        args.chunk_size = max(1, -(-args.reps // 5))
    results = _run_all(bench.scores, V, config, methods, args, bench.models)
    _finish(results, args.out, bench.description)
    print(f"total {time.perf_counter() - start:.1f} s")


def cmd_simulate(args) -> None:
    from pulse_jax import data

    _check_out_dir(args.out)
    methods = _methods(args.method)
    cand = data.handle_missing(data.load(args.scores), args.missing)
    _say_missing(cand)
    require(len(cand.models) >= 2, f"{cand.source}: need at least 2 candidate models, found {len(cand.models)}")
    m, n = cand.shape
    config = _config(args, m, n, default_budget=max(m * args.batch_size * args.init_batches, (m * n) // 4))
    V = None
    if not _uses_predictions(methods) and (args.train or args.embeddings):
        _check_side_information(args, cand, n)     # given but unused: still refuse a wrong one
    if _uses_predictions(methods):
        users = ", ".join(k for k, e in methods.items() if e.uses_predictions)
        require(args.train or args.embeddings,
                f"--method {users} needs side information: pass --train FILE or --embeddings FILE "
                "(or use --method ucbe)")
        V = _side_information(args, cand, n)
    results = _run_all(cand.scores, V, config, methods, args, cand.models)
    _finish(results, args.out, f"{Path(args.scores).name}: {m} models x {n} examples")


def _check_side_information(args, cand, n) -> None:
    """``--embeddings`` / ``--train`` checked against the candidates without fitting anything."""
    from pulse_jax import data

    if args.embeddings:
        _load_embeddings(args.embeddings, cand, n)
    if args.train:
        data.align_train(cand, data.load(args.train))


def _load_embeddings(path, cand, n):
    path = Path(path)
    require(path.is_file(), f"{path}: no such file")
    try:
        V = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise PulseInputError(f"--embeddings {path}: not a .npy array file "
                              f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    require(isinstance(V, np.ndarray) and V.dtype.kind in "biuf", f"--embeddings {path}: expected a numeric .npy array")
    require(V.ndim == 2 and V.shape[0] == n,
            f"{path}: embeddings must have shape ({n}, rank) to match {cand.source}, got {V.shape}")
    return V


def _side_information(args, cand, n):
    """V from --embeddings, or fitted on --train (aligned to the candidates' examples)."""
    from pulse_jax import data, factorization

    if args.embeddings:
        return _load_embeddings(args.embeddings, cand, n)
    train = data.align_train(cand, data.load(args.train))
    rank, settings = args.rank, factorization.DEFAULT_STAGE0
    if getattr(args, "hparams", None):
        from pulse_jax import tuning

        rank, settings = tuning.load_hparams(args.hparams)
    return factorization.fit_example_embeddings(train.scores, rank=rank, settings=settings, seed=args.seed)


def cmd_sweep(args) -> None:
    from pulse_jax import data, factorization, synthetic
    from pulse_jax.params import parse_grid_option
    from pulse_jax.sweep import sweep

    _check_out_dir(args.out)
    methods = _methods(args.method)
    require(len(methods) == 1, f"--method: a sweep runs one method, got {', '.join(methods)}")
    (method, estimator), = methods.items()
    require(args.grid, "--grid: give at least one, e.g. --grid exploration=0.25,0.5,1,2")
    grid = {}
    plugins = (estimator, _plugin("sampling rule", args.rule, "--rule"), _plugin("stopping rule", args.stop, "--stop"))
    declared = tuple(name for plugin in plugins for name, *_ in plugin.traced)
    for text in args.grid:
        name, values = parse_grid_option(text, declared)
        require(name not in grid, f"--grid {name}: given twice")
        grid[name] = values
    baseline = None
    if args.baseline:
        baseline = {}
        for item in args.baseline.split(","):
            name, sep, value = item.partition("=")
            require(sep, f"--baseline: expected NAME=VALUE[,NAME=VALUE], got {args.baseline!r}")
            name = name.strip()
            baseline[name] = float(parse_grid_option(f"{name}={value}", declared)[1][0])
    if args.scores is None:
        require(not (args.train or args.embeddings), "--train/--embeddings need --scores (the built-in benchmark "
                                                     "brings its own train split)")
        bench = synthetic.make_benchmark(seed=args.seed)
        scores, names, title = bench.scores, bench.models, bench.description
        m, n = scores.shape
        default_budget = m * args.batch_size * args.init_batches + 6400
        V = factorization.fit_example_embeddings(bench.train, rank=args.rank, seed=args.seed) \
            if estimator.uses_predictions else None
    else:
        cand = data.handle_missing(data.load(args.scores), args.missing)
        _say_missing(cand)
        m, n = cand.shape
        scores, names, title = cand.scores, cand.models, f"{Path(args.scores).name}: {m} models x {n} examples"
        default_budget = max(m * args.batch_size * args.init_batches, (m * n) // 4)
        V = None
        if estimator.uses_predictions:
            require(args.train or args.embeddings, f"{method} needs side information: pass --train FILE or "
                                                   "--embeddings FILE (or use --method ucbe)")
            V = _side_information(args, cand, n)
    config = _for_method(_config(args, m, n, default_budget), estimator)
    out = Path(args.out)
    points = 1
    for values in grid.values():
        points *= len(values)
    print(title)
    print(f"sweep of {method}: {points} points x {args.reps} repetitions = {points * args.reps:,} runs as one "
          f"program; budget {config.budget:,} cells, batch {config.batch_size}, refit every {config.refit_every}")
    result = sweep(scores, config, estimator, grid, args.reps, args.seed, V=V, base=_params(args), baseline=baseline,
                   chunk_size=args.chunk_size, progress=not args.quiet, model_names=names)
    require(0 < args.target < 1, f"--target must lie in (0, 1), got {args.target}")
    targets = tuple(sorted({0.9, 0.95, args.target}))
    rows = result.table(targets)
    _say_ties(result.results[0])
    print(result.format_table(rows, target=args.target))
    paths = result.write(out, targets, figure_target=args.target, rows=rows)
    print(f"{points} points x {args.reps} repetitions in {result.seconds:.1f} s (of which compilation "
          f"{result.compile_seconds:.1f} s, once)")
    print(f"results: {paths['json']}  {paths['csv']}  figure: {paths.get('figure')}")


def _numbers(text: str, name: str, kind=float) -> tuple:
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PulseInputError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    require(values, f"--{name}: no value given")
    return values


def cmd_tune(args) -> None:
    from pulse_jax import data, tuning

    from pulse_jax.params import seed_key

    seed_key(args.seed, "--seed")
    _check_writable_file(args.out, "--out")
    train = data.load(args.train)
    grid = {"rank": _numbers(args.ranks, "ranks", int), "lam": _numbers(args.lams, "lams"),
            "lr": _numbers(args.lrs, "lrs"), "epochs": _numbers(args.epochs, "epochs", int)}

    def progress(done, total):
        sys.stderr.write(f"\r  cross-validation: {done}/{total} settings")
        sys.stderr.flush()

    result = tuning.cross_validate(train.scores, grid, folds=args.folds, seed=args.seed, progress=progress)
    sys.stderr.write("\n")
    tuning.save_hparams(result, args.out)
    print(f"{'rank':>5} {'lam':>7} {'lr':>6} {'epochs':>6} {'held-out BCE':>14}")
    for row in sorted(result["table"], key=lambda r: r["loss"])[:10]:
        print(f"{row['rank']:>5} {row['lam']:>7g} {row['lr']:>6g} {row['epochs']:>6} "
              f"{row['loss']:>8.4f} +- {row['se']:.4f}")
    print(f"chosen by the 1-SE rule: rank {result['rank']}, lam {result['lam']}, lr {result['lr']}, "
          f"epochs {result['epochs']} -> {args.out}")


def _check_writable_file(path: str, option: str) -> None:
    """Before any computation: ``path`` can be written (its folder exists or can be made, and is writable)."""
    out = Path(path)
    require(not out.is_dir(), f"{option} {out}: is a directory; give a file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PulseInputError(f"{option} {out}: cannot create its folder {out.parent} ({err.strerror or err})") from None
    require(os.access(out.parent, os.W_OK), f"{option} {out}: its folder {out.parent} is not writable")


def _load_evaluate(spec: str):
    from pulse_jax import registry

    module_name, _, attr = spec.partition(":")
    require(module_name and attr, f"--evaluate must look like package.module:function, got {spec!r}")
    function = registry.load_attribute(spec, "--evaluate")
    require(callable(function), f"--evaluate: {module_name!r} has no function {attr!r}")
    return function


def _read_lines(path: str, what: str) -> list[str]:
    p = Path(path)
    require(p.exists(), f"{what} {path}: no such file")
    require(p.is_file(), f"{what} {path}: is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise PulseInputError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise PulseInputError(f"{what} {path}: not a UTF-8 text file with one entry per line") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    require(lines, f"{what} {path}: the file is empty")
    return lines


def _examples_option(text: str):
    """``--examples``: a positive count, or a file of example ids (one per line)."""
    try:
        count = int(text)
    except ValueError:
        return _read_lines(text, "--examples")
    require(count >= 1, f"--examples {text}: give a positive number of examples or a file of example ids")
    return count


def cmd_select(args) -> None:
    from pulse_jax import data, live

    models = _read_lines(args.models, "--models")
    examples = _examples_option(args.examples)
    evaluate = _load_evaluate(args.evaluate)
    (_, estimator), = _methods(args.method).items()
    rule = _plugin("sampling rule", args.rule, "--rule")
    train = None
    if args.train and estimator.uses_predictions:
        train = data.load(args.train)
    require(not Path(args.log).is_dir(), f"--log {args.log}: is a directory; give a file name")
    require(args.grace is None or args.grace >= 0, f"--grace must be >= 0 seconds, got {args.grace}")
    require(args.concurrency >= 1, f"--concurrency must be >= 1, got {args.concurrency}")
    out = Path(args.report) if args.report else Path(args.log).with_name(Path(args.log).stem + "_report")
    require(not out.exists() or out.is_dir(), f"--report {out}: exists and is not a directory")
    selector = live.Selector(models, examples, args.budget, method=estimator, batch_size=args.batch_size,
                             init_batches=args.init_batches, refit_every=args.refit_every, seed=args.seed,
                             train=train, rank=args.rank, log=args.log, rule=rule, params=_params(args))
    try:
        if selector.spent:
            again = len(selector.pending())
            print(f"resuming {args.log}: {selector.spent:,} cells already evaluated"
                  + (f"; {again} batch(es) that were in flight will be asked again" if again else ""))
        try:
            report = live.run(evaluate, selector, concurrency=args.concurrency, retries=args.retries,
                              stop_early=not args.no_early_stop, progress=not args.quiet, grace=args.grace)
        except live.EvaluationError as err:
            raise PulseInputError(f"{err}. The {selector.spent:,} cells evaluated so far are safe in {args.log}; "
                                  "run the same command again to continue") from None
        except live.Interrupted:
            raise
        except KeyboardInterrupt:   # before the run started (replay, compilation): nothing was in flight
            print(f"\ninterrupted: {selector.spent:,} cells are safe in {args.log}; run the same command again "
                  "to continue", file=sys.stderr)
            raise
    finally:
        selector.close()
    out.mkdir(parents=True, exist_ok=True)
    from pulse_jax.report import clean_json
    import json

    (out / "report.md").write_text(report.to_markdown(), encoding="utf-8")
    (out / "report.json").write_text(json.dumps(clean_json(report.to_dict()), indent=2), encoding="utf-8")
    report.plot(out / "estimates.png")
    print(report.to_markdown())
    print(f"report: {out / 'report.md'} (+ report.json, estimates.png)")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from pulse_jax.simulate import enable_compilation_cache

    enable_compilation_cache()
    try:
        commands = {"demo": cmd_demo, "simulate": cmd_simulate, "sweep": cmd_sweep, "tune": cmd_tune,
                    "select": cmd_select}
        commands[args.command](args)
    except PulseInputError as err:
        print(f"pulse-jax: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:   # a file we were told to read or write: say which, in one line
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(f"pulse-jax: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        from pulse_jax.runner import Interrupted

        if isinstance(err, Interrupted):
            print(f"\npulse-jax: {err}", file=sys.stderr)
            return err.exit_code
        print("pulse-jax: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
