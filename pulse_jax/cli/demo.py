"""``pulse-jax demo``: UCB-E, PULSE and Naive-Pooling on the built-in benchmark (no files needed)."""
from __future__ import annotations

import time

from pulse_jax.cli.options import BUILTIN_BANDIT_CELLS, HelpFormatter, add_run_options, bandit_config, check_param_options, check_run_args, numbers_of, parse_methods, resolve_defaults, rule_and_stop, run_budget, uses_predictions
from pulse_jax.cli.output import check_out_dir, finish, run_all


def add(sub) -> None:
    demo = sub.add_parser("demo", formatter_class=HelpFormatter,
                          help="compare the three methods on the built-in synthetic benchmark",
                          description="UCB-E, PULSE and Naive-Pooling on the built-in 40 x 1,000 benchmark.")
    add_run_options(demo, reps=300, budget_help="total cells, initialization included "
                                                 f"(default: initialization + {BUILTIN_BANDIT_CELLS:,})",
                    source="built-in", costs="here every cell costs 1")
    demo.add_argument("--data", default="builtin", choices=("builtin", "cruxeval_o", "chembench"),
                      help="the benchmark: the built-in synthetic one, or a real matrix shipped with pulse-jax "
                           "(CRUXEval-O 48 x 800, ChemBench 22 x 2,854; half the models are the history, chosen "
                           "with --seed)")
    demo.add_argument("--out", default="pulse_demo", help="results directory")


def run(args) -> None:
    from pulse_jax import synthetic

    check_run_args(args)
    resolve_defaults(args, "built-in")
    check_out_dir(args.out, args.force)
    methods = parse_methods(args.method, args)
    bench = synthetic.make_benchmark(seed=args.seed) if args.data == "builtin" else _real(args.data, args.seed)
    m, n = bench.scores.shape
    rule, stop = rule_and_stop(args)
    check_param_options(args, [(e, rule, stop) for e in methods.values()])
    budget = run_budget(args, m, n, default_budget=m * args.batch_size * args.init_batches + BUILTIN_BANDIT_CELLS)
    numbers_of(args)        # the numbers' own checks (range, one owner each), before JAX is imported
    config = bandit_config(args, m, n, budget)
    print(bench.description)
    print(f"budget {config.budget:,} cells ({config.init_cells:,} for initialization), batch {config.batch_size}, "
          f"refit every {config.refit_every} steps, {args.reps} repetitions per method")
    start = time.perf_counter()
    from pulse_jax.stats import factorization   # JAX: imported once every option is checked

    V = factorization.fit_example_embeddings(bench.train, rank=args.rank, seed=args.seed) \
        if uses_predictions(methods) else None
    if args.chunk_size is None:  # a few chunks so the progress bar moves
        args.chunk_size = max(1, -(-args.reps // 5))
    results = run_all(bench.scores, V, config, methods, args, bench.models, rules=(rule, stop))
    finish(results, args.out, bench.description)
    print(f"total {time.perf_counter() - start:.1f} s")


def _real(name: str, seed: int):
    """A shipped real matrix as the demo's benchmark: its models split in half at random (``seed``),
    one half the history the embeddings are fitted on, the other the candidates."""
    from types import SimpleNamespace

    from pulse_jax import datasets

    train, cand = datasets.split(name, seed=seed)
    m, n = cand.scores.shape
    return SimpleNamespace(scores=cand.scores, train=train.scores, models=cand.models,
                           description=f"{datasets.title(name)}: {m} candidates x {n:,} examples, {train.scores.shape[0]} "
                                       f"historical models (split with seed {seed})")
