"""``pulse-jax simulate``: Monte Carlo repetitions of each method on a score matrix file."""
from __future__ import annotations

from pathlib import Path

from pulse_jax.cli.inputs import check_side_information, costs_of, one_side_information, side_information
from pulse_jax.cli.options import HelpFormatter, add_cost_option, add_input_options, add_run_options, bandit_config, check_param_options, check_run_args, numbers_of, parse_methods, resolve_defaults, rule_and_stop, run_budget, uses_predictions
from pulse_jax.cli.output import check_out_dir, finish, hash_inputs, run_all, say_missing
from pulse_jax.errors import require


def add(sub) -> None:
    sim = sub.add_parser("simulate", formatter_class=HelpFormatter,
                         help="repetitions of one or more methods on your score matrix",
                         description="Monte Carlo repetitions of each method on your candidates' score matrix.")
    add_input_options(sim, scores_required=True)
    add_cost_option(sim)
    sim.add_argument("--hparams", default=None, help="stage-0 settings from `pulse-jax tune` (overrides --rank)")
    add_run_options(sim, reps=200, budget_help="total cells, initialization included (default: 25%% of all cells)",
                    source="file")
    sim.add_argument("--out", required=True, help="results directory (JSON + NPZ + PNG + provenance)")


def run(args) -> None:
    from pulse_jax.fileio import data

    check_run_args(args)
    resolve_defaults(args, "file")
    check_out_dir(args.out, args.force)
    methods = parse_methods(args.method, args)
    one_side_information(args)
    inputs = hash_inputs(args.scores, args.train, args.embeddings, args.hparams)
    cand = data.handle_missing(data.load(args.scores), args.missing)
    say_missing(cand)
    require(len(cand.models) >= 2, f"{cand.source}: need at least 2 candidate models, found {len(cand.models)}")
    m, n = cand.shape
    rule, stop = rule_and_stop(args)
    check_param_options(args, [(e, rule, stop) for e in methods.values()])
    budget = run_budget(args, m, n, default_budget=max(m * args.batch_size * args.init_batches, (m * n) // 4))
    numbers_of(args)        # the numbers' own checks (range, one owner each), before JAX is imported
    V = None
    if not uses_predictions(methods) and (args.train or args.embeddings):
        check_side_information(args, cand, n)     # given but unused: still refuse a wrong one
    if uses_predictions(methods):
        users = ", ".join(k for k, e in methods.items() if e.uses_predictions)
        require(args.train or args.embeddings,
                f"--method {users} needs side information: pass --train FILE or --embeddings FILE "
                "(or use --method ucbe)")
    cost = costs_of(args, cand.models, cand.examples, cand.scores)
    if uses_predictions(methods):
        V = side_information(args, cand, n)       # fitted (JAX) once everything else is checked
    config = bandit_config(args, m, n, budget)
    results = run_all(cand.scores, V, config, methods, args, cand.models, rules=(rule, stop), cost=cost)
    finish(results, args.out, f"{Path(args.scores).name}: {m} models x {n} examples",
            inputs=inputs)
