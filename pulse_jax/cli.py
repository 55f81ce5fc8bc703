"""Command line: ``pulse-jax demo``, ``simulate``, ``sweep``, ``tune`` and ``select``.

Errors in the input print one line (``pulse-jax: error: ...``) and exit 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import zipfile
import time
from pathlib import Path

import numpy as np

from pulse_jax.errors import PulseInputError, require
from pulse_jax.io import files

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


#: The defaults of a run, by where the scores come from; ``demo``, ``simulate`` and ``sweep`` share them.
#: The built-in benchmark (40 x 1,000) is small: small batches and frequent refits. A file gets the
#: paper's settings (B = 64, a refit every 1,000 steps). ``select`` certifies with the fewest cells at
#: the smallest batch measured (``docs/benchmarks/batch_effect.md``; ``docs/confidence.md``, "Batch
#: size and the challenger"), so it asks for small batches.
RUN_DEFAULTS = {
    "built-in": {"batch_size": 16, "refit_every": 25, "rank": 8},
    "file": {"batch_size": 64, "refit_every": 1000, "rank": 16},
    "live": {"batch_size": 8, "refit_every": 1000, "rank": 16},
}
#: Bandit cells after initialization on the built-in benchmark; a file gets a quarter of its cells.
BUILTIN_BANDIT_CELLS = 6400


def _by_source(key: str, live: bool = False) -> str:
    b, f = RUN_DEFAULTS["built-in"][key], RUN_DEFAULTS["file"][key]
    return f"default: {RUN_DEFAULTS['live'][key]:,}" if live else \
        f"default: {b:,} on the built-in benchmark, {f:,} on a file"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, except where there is none or the help states it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or action.default == [] \
                or action.default == argparse.SUPPRESS or "default" in text:
            return text
        return super()._get_help_string(action)


def _add_bandit_options(p: argparse.ArgumentParser, *, methods_help: str, live: bool = False) -> None:
    """The options every run shares (simulation and live selection)."""
    p.add_argument("--method", help=methods_help)
    p.add_argument("--batch-size", type=int, default=None, help=f"examples per pull, B ({_by_source('batch_size', live)})")
    p.add_argument("--init-batches", type=int, default=1, help="batches per model at initialization (T0)")
    p.add_argument("--exploration", type=float, default=None,
                   help="the index rule's exploration constant a (rule.exploration; default 1)")
    p.add_argument("--refit-every", type=int, default=None,
                   help="bandit steps between refits of the factorization (tau); 0 = only the initial fit "
                        f"({_by_source('refit_every', live)})")
    p.add_argument("--rank", type=int, default=None,
                   help=f"rank of the example embeddings fitted on the train split ({_by_source('rank', live)})")
    p.add_argument("--delta", type=float, default=0.05, help="intervals hold with probability 1 - delta")
    p.add_argument("--bounds", default="all", choices=("all", "certification"),
                   help="all: every model's interval holds at every look at once; certification: only what "
                        "certifying the best needs (a certificate is still wrong at most delta; each upper bound at "
                        "delta/2 on its own, so far fewer cells)")
    p.add_argument("--sequence", default="bernstein", choices=("bernstein", "betting"),
                   help="the confidence sequences behind certification: bernstein (predictable-mixture empirical "
                        "Bernstein) or betting (the exact capital on 1,000 grid means: narrower, more memory "
                        "per model)")
    p.add_argument("--rule", default="ucbe",
                   help="sampling rule: ucbe (the paper's index), lucb, top_two, top_two_interval (Top-Two with the "
                        "interval challenger), successive_halving, or "
                        f"{PLUGIN_HELP}; methods without an interval keep ucbe when the rule needs one")
    p.add_argument("--seed", type=int, default=0, help="random seed, an integer in [0, 2**64)")


def _add_run_options(p: argparse.ArgumentParser, *, reps: int, budget_help: str, one_method: bool = False) -> None:
    names = "ucbe, pulse, pulse_certify, pulse_hedged, naive"
    _add_bandit_options(p, methods_help=(f"the estimator: {names}, or {PLUGIN_HELP} (default: pulse)" if one_method
                                         else f"comma-separated estimators: {names}, or {PLUGIN_HELP} "
                                              "(default: ucbe,pulse,naive)"))
    p.set_defaults(method="pulse" if one_method else "ucbe,pulse,naive")
    p.add_argument("--reps", type=int, default=reps, help="repetitions" + ("" if one_method else " per method"))
    p.add_argument("--budget", type=int, default=None, help=budget_help)
    p.add_argument("--stop", default="budget",
                   help="stopping rule: budget (spend it all), certified (stop once a model is certified best), "
                        f"or {PLUGIN_HELP}; methods without an interval spend the budget")
    _add_certificate_options(p)
    p.add_argument("--chunk-size", type=int, default=None,
                   help="repetitions per compiled batch (default: sized from memory)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--force", action="store_true", help="write into --out even if it already holds files")


def _add_input_options(p: argparse.ArgumentParser, *, scores_required: bool) -> None:
    p.add_argument("--scores", required=scores_required,
                   help="candidates' scores (.csv or .npz; missing cells allowed)"
                        + ("" if scores_required else " (default: the built-in benchmark)"))
    p.add_argument("--missing", default="keep", choices=("keep", "drop-examples", "drop-models"),
                   help="missing candidate cells: keep (each model's benchmark is what it has scores for), "
                        "or drop the examples / the models that have gaps")
    p.add_argument("--train", default=None, help="historical models' scores on the same examples (side information)")
    p.add_argument("--embeddings", default=None, help=".npy file with example embeddings V (n x rank)")


def _add_certificate_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--epsilon", type=float, default=None,
                       help="stop once a model is certified within EPSILON of the best mean (the stopping rule "
                            "epsilon_good; replaces --stop)")
    group.add_argument("--top-k", type=int, default=None, metavar="K",
                       help="stop once the K best models are certified as a set (the stopping rule top_k; the "
                            "upper bounds are raised to the level K of them need)")
    group.add_argument("--tie-group", type=int, default=None, metavar="SIZE",
                       help="stop once the best model is certified to be one of at most SIZE models (the stopping "
                            "rule tie_group; 1 is exact-best certification)")


def _certificate(args):
    """``(stop, numbers)`` of ``--epsilon`` / ``--top-k`` / ``--tie-group``; ``(None, {})`` without them."""
    from pulse_jax import stopping

    given = [(flag, value) for flag, value in (("--epsilon", args.epsilon), ("--top-k", args.top_k),
                                                ("--tie-group", args.tie_group)) if value is not None]
    if not given:
        return None, {}
    (flag, value), = given
    require(args.stop in (None, "budget") and not getattr(args, "stop_given", False),
            f"{flag} sets the stopping rule; drop --stop {args.stop}")
    if flag == "--epsilon":
        require(0 <= value < 1, f"--epsilon must be in [0, 1), got {value:g}")
        return stopping.epsilon_good(), {"stop.epsilon": value}
    require(value >= 1, f"{flag} must be >= 1, got {value}")
    if flag == "--top-k":
        return stopping.top_k(value), {}
    return stopping.tie_group(), {"stop.size": float(value)}


def _check_certificate_size(args, n_models: int) -> None:
    """``--top-k K`` and ``--tie-group SIZE`` name fewer models than there are: a set of all of them
    certifies nothing."""
    for flag, value in (("--top-k", getattr(args, "top_k", None)), ("--tie-group", getattr(args, "tie_group", None))):
        require(value is None or value < n_models,
                f"{flag} {value}: must be smaller than the number of models ({n_models}); {value} of {n_models} "
                "models certifies nothing")


def _rule(args):
    """``--rule``'s plug-in; with ``--top-k K`` (K > 1) and no ``--rule``, LUCB for the top K: the
    default rules chase the best model alone, which a top-k certificate does not wait on."""
    if getattr(args, "top_k", None) and args.top_k > 1 and not getattr(args, "rule_given", True):
        from pulse_jax.rules import lucb_top_k

        rule = lucb_top_k(args.top_k)
        print(f"note: --top-k {args.top_k} samples by {rule.name} (the set's weakest member against the best "
              "outsider); give --rule to choose another", file=sys.stderr)
        return rule
    return _plugin("sampling rule", args.rule, "--rule")


def _certificate_levels(args, numbers: dict, stop, n_models: int) -> dict:
    """The numbers with ``cs_simultaneous`` raised to what ``stop``'s claim needs (top-k: log k / log m)."""
    import math

    k = stop.upper_models
    need = math.log(k) / math.log(n_models) if 1 < k < n_models else 0.0
    if numbers["cs_simultaneous"] < need:
        print(f"note: --top-k {k} rests on {k} models' upper bounds at once, so their level is raised to cover "
              f"{k} of the {n_models} together (cs_simultaneous {numbers['cs_simultaneous']:g} -> log {k} / log "
              f"{n_models} = {need:.3f})", file=sys.stderr)
        numbers = {**numbers, "cs_simultaneous": need}
    return numbers


def _add_stopping_options(sel: argparse.ArgumentParser) -> None:
    sel.add_argument("--stop", default=None,
                     help="stopping rule, checked before every batch: certified (stop once a model is certified "
                          f"best), budget (spend it all), or {PLUGIN_HELP} (default: certified; budget for a "
                          "method without an interval)")
    _add_certificate_options(sel)
    sel.add_argument("--grace", type=float, default=None,
                     help="on SIGINT/SIGTERM, wait at most this many seconds for the batches in flight (default: "
                          "until they finish; a second signal abandons them)")


def _add_demo(sub) -> None:
    demo = sub.add_parser("demo", formatter_class=_HelpFormatter,
                          help="compare the three methods on the built-in synthetic benchmark",
                          description="UCB-E, PULSE and Naive-Pooling on the built-in 40 x 1,000 benchmark.")
    _add_run_options(demo, reps=300, budget_help="total cells, initialization included "
                                                 f"(default: initialization + {BUILTIN_BANDIT_CELLS:,})")
    demo.add_argument("--out", default="pulse_demo", help="results directory")


def _add_simulate(sub) -> None:
    sim = sub.add_parser("simulate", formatter_class=_HelpFormatter,
                         help="repetitions of one or more methods on your score matrix",
                         description="Monte Carlo repetitions of each method on your candidates' score matrix.")
    _add_input_options(sim, scores_required=True)
    sim.add_argument("--hparams", default=None, help="stage-0 settings from `pulse-jax tune` (overrides --rank)")
    _add_run_options(sim, reps=200, budget_help="total cells, initialization included (default: 25%% of all cells)")
    sim.add_argument("--out", required=True, help="results directory (JSON + NPZ + PNG + provenance)")


def _add_sweep(sub) -> None:
    sw = sub.add_parser("sweep", formatter_class=_HelpFormatter,
                        help="a hyperparameter sweep of one method as one compiled program",
                        description="Every (grid point, repetition) pair of one method as one compiled program.")
    _add_input_options(sw, scores_required=False)
    sw.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="a swept parameter and its values (repeat for a Cartesian product); NAME is an engine "
                         "number (delta, init_refit_lr, init_refit_l2, refit_lr, refit_l2, cs_horizon, "
                         "cs_simultaneous, refit_prior) or a plug-in's, by path or by its field name alone: "
                         "rule.exploration, estimator.fixed_lambda (nan = the paper's adaptive lambda), "
                         "rule.leader_fraction, stop.epsilon, ...")
    sw.add_argument("--target", type=float, default=0.95,
                    help="accuracy target of the printed table and the figure (0.9 and 0.95 are always in the JSON)")
    sw.add_argument("--baseline", default=None, metavar="NAME=V,...",
                    help="the point savings are measured against (default: the paper's setting when the grid has "
                         "it, else the point with the highest accuracy over the run)")
    _add_run_options(sw, reps=200, one_method=True,
                     budget_help="total cells, initialization included (default: initialization + "
                                 f"{BUILTIN_BANDIT_CELLS:,} on the built-in benchmark, 25%% of all cells on a file)")
    sw.add_argument("--out", required=True, help="results directory (sweep.json, sweep.csv, sweep.png, provenance)")


def _add_tune(sub) -> None:
    tune = sub.add_parser("tune", formatter_class=_HelpFormatter,
                          help="choose the factorization's hyperparameters by cross-validation (1-SE)",
                          description="K-fold cross-validation of the stage-0 factorization over the observed "
                                      "cells of the train matrix; the 1-SE rule picks the simplest good setting.")
    tune.add_argument("--train", required=True, help="historical models' scores (CSV/NPZ, missing cells allowed)")
    tune.add_argument("--out", required=True, help="JSON file for `simulate --hparams`")
    tune.add_argument("--force", action="store_true", help="write over an existing --out file")
    tune.add_argument("--ranks", default="4,8,16,32", help="comma-separated ranks to try")
    tune.add_argument("--lams", default="0.001,0.01,0.1", help="comma-separated L2 weights to try")
    tune.add_argument("--lrs", default="0.05", help="comma-separated Adam learning rates to try")
    tune.add_argument("--epochs", default="150,300", help="comma-separated numbers of full-batch Adam steps")
    tune.add_argument("--folds", type=int, default=5, help="cross-validation folds (over the observed cells)")
    tune.add_argument("--seed", type=int, default=0, help="random seed of the folds and the fits")


def _add_select(sub) -> None:
    sel = sub.add_parser("select", formatter_class=_HelpFormatter,
                         help="pick the best real model, evaluating batches with your scorer",
                         description="Live selection: asks your scorer for one batch at a time, logs every "
                                     "paid-for score, resumes from the log, stops once the best is certified.")
    sel.add_argument("--models", required=True, help="text file, one candidate name per line")
    sel.add_argument("--examples", default=None,
                     help="number of examples (ids 0..N-1), or a text file with one example id per line "
                          "(default with --lm-eval-task: every document of the task)")
    sel.add_argument("--budget", type=int, required=True, help="total cells, initialization included")
    sel.add_argument("--evaluate", default=None,
                     help="package.module:function taking (model, example_ids) and returning one score in [0, 1] "
                          "per example (or use --lm-eval-task)")
    sel.add_argument("--lm-eval-task", default=None,
                     help="score through lm-evaluation-harness on this task; each line of --models is then an lm-eval "
                          "model spec TYPE[:MODEL_ARGS], e.g. hf:pretrained=EleutherAI/pythia-70m")
    sel.add_argument("--lm-eval-metric", default="acc", help="the per-document lm-eval metric, in [0, 1]")
    sel.add_argument("--lm-eval-filter", default=None, help="the lm-eval filter (default: the task's only one)")
    sel.add_argument("--lm-eval-include", default=None, help="a folder of custom lm-eval task YAML files")
    sel.add_argument("--lm-eval-device", default=None,
                     help="where lm-eval models run: cpu, cuda:0, ... (default: a GPU when torch sees one)")
    sel.add_argument("--lm-eval-plugin", action="append", default=[], metavar="MODULE",
                     help="import this module first (e.g. one that registers an lm-eval model class of your own)")
    sel.add_argument("--inspect-task", default=None, metavar="FILE.py@TASK",
                     help="score through Inspect (inspect-ai) on this task; each line of --models is then an Inspect "
                          "model name, e.g. openai/gpt-4o-mini")
    sel.add_argument("--inspect-scorer", default=None, help="the task's scorer to read (default: its only one)")
    sel.add_argument("--inspect-metric", default=None, help="for a scorer whose values are dicts, the key to read")
    sel.add_argument("--inspect-log-dir", default=None,
                     help="where Inspect writes its logs (default: <log>.inspect beside the log)")
    sel.add_argument("--value-map", action="append", default=[], metavar="VALUE=NUMBER",
                     help="an Inspect score value as a number in [0, 1] (defaults: C=1, I=0, P=0.5, N=0)")
    sel.add_argument("--price", action="append", default=[], metavar="MODEL=IN/OUT",
                     help="dollars per million input/output tokens of a model (*=IN/OUT: every other model)")
    sel.add_argument("--cost-per-call", type=float, default=None, help="dollars per cell (added to --price)")
    sel.add_argument("--budget-usd", type=float, default=None,
                     help="stop asking before a batch that could take the spend past this many dollars")
    sel.add_argument("--usage", action="append", default=[], metavar="LOGS",
                     help="Inspect logs (files or folders) of the task whose token counts estimate the cost")
    sel.add_argument("--log", required=True, help="the log (an SQLite database, e.g. run.db); run the same command "
                                                 "again to resume")
    sel.add_argument("--train", default=None, help="historical scores on the same examples (CSV/NPZ)")
    _add_bandit_options(sel, methods_help=f"the estimator: pulse_hedged (PULSE with lambda 1/2, raw and proxy "
                                          f"sequences), pulse_certify (lambda 1/2, the proxy sequence alone), pulse "
                                          f"(the paper's), ucbe, naive, or {PLUGIN_HELP} (default: pulse_hedged)",
                        live=True)
    # Live selection wants a certified answer for the fewest paid calls: the configuration that certifies
    # with the fewest cells, and never more than UCB-E's, on every data set measured
    # (docs/benchmarks/certify_betting.md); simulations keep the paper's.
    sel.set_defaults(method="pulse_hedged", rule="top_two_interval", bounds="certification", sequence="betting")
    sel.add_argument("--concurrency", type=int, default=1, help="batches evaluated at once (thread pool)")
    sel.add_argument("--retries", type=int, default=3,
                     help="retries of a failing evaluate call (rate limits, 5xx answers); only a failure that "
                          "outlasts them stops the run")
    sel.add_argument("--retry-wait", type=float, default=1.0,
                     help="seconds before the first retry; doubled each time, times a random factor in [0.5, 1] "
                          "(a scorer's own retry-after hint is followed instead)")
    sel.add_argument("--retry-max-wait", type=float, default=60.0,
                     help="the longest wait between two attempts (seconds)")
    _add_stopping_options(sel)
    sel.add_argument("--report", default=None, help="report directory (default: <log name>_report beside the log); "
                                                    "a report of another log there needs --force")
    sel.add_argument("--force", action="store_true", help="replace the results in a --report folder that holds "
                                                         "another run's")
    sel.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_import(sub) -> None:
    imp = sub.add_parser("import", formatter_class=_HelpFormatter,
                         help="per-sample results (lm-eval logs, a long table) into a score matrix CSV",
                         description="Convert per-sample evaluation results into the models x examples CSV "
                                     "that simulate, sweep and select read (missing cells stay empty).")
    kinds = imp.add_subparsers(dest="source", required=True, metavar="SOURCE")
    lm = kinds.add_parser("lm-eval", formatter_class=_HelpFormatter,
                          help="lm-evaluation-harness output folders (--output_path ... --log_samples)")
    lm.add_argument("folders", nargs="+", metavar="DIR", help="output folders, searched for samples_<task>_*.jsonl")
    lm.add_argument("--task", required=True, help="the lm-eval task")
    lm.add_argument("--metric", required=True, help="the per-sample metric (acc, exact_match, ...), in [0, 1]")
    lm.add_argument("--filter", default=None, help="the filter (strict-match, flexible-extract, ...); needed when "
                                                   "the task logs several")
    ins = kinds.add_parser("inspect", formatter_class=_HelpFormatter,
                           help="Inspect eval logs (.eval / .json files, or folders of them)")
    ins.add_argument("logs", nargs="+", metavar="LOG", help="log files or folders (searched recursively)")
    ins.add_argument("--task", default=None, help="the task (needed when the logs hold several)")
    ins.add_argument("--scorer", default=None, help="the scorer (needed when samples carry several scores)")
    ins.add_argument("--metric", default=None, help="for a scorer whose values are dicts, the key to read")
    ins.add_argument("--epochs", choices=("mean", "separate"), default="mean",
                     help="several epochs of a sample: averaged into one example, or one example each (id@epoch)")
    ins.add_argument("--value-map", action="append", default=[], metavar="VALUE=NUMBER",
                     help="a score value as a number in [0, 1] (defaults: C=1, I=0, P=0.5, N=0)")
    ins.add_argument("--tokens", default=None, help="CSV of each cell's token usage (default: <out>.tokens.csv)")
    long = kinds.add_parser("long", formatter_class=_HelpFormatter,
                            help="a long table with one row per (model, example, score): CSV, JSONL or Parquet")
    long.add_argument("file", help="the table (.csv, .jsonl or .parquet)")
    long.add_argument("--model-column", default="model", help="the column naming the model")
    long.add_argument("--example-column", default="example", help="the column naming the example")
    long.add_argument("--score-column", default="score", help="the column holding the score, in [0, 1]")
    for p in (lm, ins, long):
        p.add_argument("--out", required=True, help="the score matrix CSV to write")
        p.add_argument("--force", action="store_true", help="write over an existing --out file")


def _add_log(sub) -> None:
    log = sub.add_parser("log", formatter_class=_HelpFormatter, help="read, export or import a select log",
                         description="A select log is an SQLite database. Show what it holds, export it as "
                                     "JSONL to read or diff, or import a JSONL log as a new database.")
    actions = log.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", formatter_class=_HelpFormatter, help="the run, its progress and checks")
    show.add_argument("log", help="the log (a running one can be read)")
    export = actions.add_parser("export", formatter_class=_HelpFormatter, help="the log as JSONL (checksummed)")
    export.add_argument("log", help="the log")
    export.add_argument("--jsonl", default="-", metavar="FILE", help="where to write (default: standard output)")
    export.add_argument("--force", action="store_true", help="write over an existing --jsonl file")
    imp = actions.add_parser("import", formatter_class=_HelpFormatter, help="a JSONL log as a new database")
    imp.add_argument("jsonl", help="the JSONL log (from export, or an earlier pulse-jax)")
    imp.add_argument("log", help="the database to create (must not exist)")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the command's help (argparse prints the
    whole usage first, which buries the error)."""

    def error(self, message):
        self.exit(2, f"pulse-jax: error: {self.prog.removeprefix('pulse-jax').strip() or 'pulse-jax'}: {message} "
                     f"(see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from pulse_jax import __version__

    parser = _Parser(prog="pulse-jax", formatter_class=_HelpFormatter, description=(
        "Find the best model while evaluating a fraction of the (model, example) cells: "
        "PULSE, UCB-E and Naive-Pooling as a vmap-ed JAX simulation, and live selection."),
        epilog="Compiled programs are cached in $PULSE_JAX_CACHE (default ~/.cache/pulse-jax/xla); "
               "PULSE_JAX_CACHE=off turns the cache off.")
    parser.add_argument("--version", action="version", version=f"pulse-jax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_demo, _add_simulate, _add_sweep, _add_tune, _add_select, _add_import, _add_log):
        add(sub)
    return parser


def _resolve_defaults(args, source: str) -> None:
    """Fill the options whose default depends on where the scores come from (`RUN_DEFAULTS`)."""
    args.defaulted = set()
    for key, value in RUN_DEFAULTS[source].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
            args.defaulted.add(key)


def _check_run_args(args) -> None:
    """Every number of a run, checked before anything is loaded or computed."""
    from pulse_jax.stats.seeds import seed_key

    seed_key(args.seed, "--seed")
    require(args.reps >= 1, f"--reps must be >= 1, got {args.reps}")
    require(args.chunk_size is None or args.chunk_size >= 1, f"--chunk-size must be >= 1, got {args.chunk_size}")
    _at_most(args.reps, "--reps")
    _at_most(args.chunk_size, "--chunk-size")
    _check_numbers(args)


#: The largest count any option takes (the engine indexes with 32-bit integers).
LARGEST_COUNT = 2**31 - 1


def _at_most(value, option: str, high: int = LARGEST_COUNT) -> None:
    require(value is None or value <= high, f"{option} {value}: at most {high:,}")


def _progress(args):
    """Progress bars only for someone watching: never with ``--quiet`` or when stderr is not a terminal
    (``2> log`` gets no carriage returns); ``None`` lets the library decide the same way."""
    return False if getattr(args, "quiet", False) else sys.stderr.isatty()


#: Without a terminal, long work says how far it is at most this often (seconds).
PROGRESS_LINE_EVERY = 60.0


class _Lines:
    """Progress for a log file or a pipe (no terminal): one plain line at the start (``first``, or the
    first report), then at most one a `PROGRESS_LINE_EVERY` seconds, and one when the work is done."""

    def __init__(self, first: str | None = None):
        self.last = -float("inf")             # without a first line, the first report is printed
        if first is not None:
            sys.stderr.write(first + "\n")
            sys.stderr.flush()
            self.last = time.monotonic()

    def __call__(self, text: str, done: bool = False) -> None:
        now = time.monotonic()
        if done or now - self.last >= PROGRESS_LINE_EVERY:
            self.last = now
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def _simulation_progress(args, name: str):
    """``simulate``'s ``progress``: a bar on a terminal, lines otherwise (`_Lines`), none with --quiet."""
    if getattr(args, "quiet", False):
        return False
    if sys.stderr.isatty():
        return True
    lines = _Lines(f"  {name}: compiling, then running (a line a minute without a terminal)")
    return lambda done, total, seconds: lines(f"  {name}: {done:,}/{total:,} repetitions, {seconds:.0f} s",
                                              done == total)


def _check_numbers(args) -> None:
    """The options every run shares, in the options' own words (before anything is loaded)."""
    require(args.budget is None or args.budget >= 1, f"--budget must be >= 1, got {args.budget}")
    _at_most(args.budget, "--budget")
    for option in ("batch_size", "init_batches", "refit_every", "rank"):
        value = getattr(args, option, None)
        low = 0 if option == "refit_every" else 1
        require(value is None or value >= low, f"--{option.replace('_', '-')} must be >= {low}, got {value}")
        _at_most(value, f"--{option.replace('_', '-')}")
    delta = getattr(args, "delta", None)
    if delta is not None:
        require(0 < delta < 1, f"--delta {delta:g}: must lie strictly between 0 and 1 (the chance of a wrong "
                               "certificate)")


def _check_first_look(budget: int, models: int, args, where: str) -> None:
    """The budget pays for the first look (every model on ``--init-batches`` batches), in option words."""
    first = models * args.batch_size * args.init_batches
    require(budget >= first, f"--budget {budget:,} is smaller than the first look: {models} models ({where}) x "
                             f"--batch-size {args.batch_size} x --init-batches {args.init_batches} = {first:,} cells; "
                             f"give --budget {first:,} or more")


def _config(args, m: int, n: int, default_budget: int):
    from pulse_jax.engine import BanditConfig

    budget = args.budget if args.budget is not None else default_budget
    if budget > m * n:
        print(f"note: --budget {budget:,} is more than the matrix's {m * n:,} cells; using {m * n:,}")
        budget = m * n
    require(args.reps >= 1, f"--reps must be >= 1, got {args.reps}")
    require(args.batch_size <= n, f"--batch-size {args.batch_size} is larger than the number of examples ({n})")
    _check_first_look(budget, m, args, "candidates")
    _check_certificate_size(args, m)
    return BanditConfig(n_models=m, n_examples=n, budget=budget, batch_size=args.batch_size,
                        init_batches=args.init_batches, refit_every=args.refit_every,
                        rule=_rule(args),
                        stop=_certificate(args)[0] or _plugin("stopping rule", args.stop, "--stop"),
                        cs_grid=_cs_grid(args))


def _cs_grid(args) -> int:
    """``BanditConfig.cs_grid`` of ``--sequence``."""
    from pulse_jax.stats.confidence import BETTING_GRID

    return BETTING_GRID if args.sequence == "betting" else 0


def _for_method(config, estimator, alone: bool):
    """In a comparison of several methods, a method without an interval keeps the index rule and spends
    the budget when the chosen rule or stopping rule needs an interval (so it runs beside the others), and
    says so; run alone, such a choice is refused (nothing would be what was asked for)."""
    import dataclasses

    from pulse_jax import engine

    if estimator.has_interval or not (config.rule.needs_interval or config.stop.needs_interval):
        return config
    if alone:
        engine.check_compatible(config, estimator)
    changed = dataclasses.replace(config, rule="ucbe" if config.rule.needs_interval else config.rule,
                                  stop="budget" if config.stop.needs_interval else config.stop)
    swaps = [f"{kind} {old.name} -> {new.name}" for kind, old, new in (("rule", config.rule, changed.rule),
                                                                      ("stop", config.stop, changed.stop))
             if old.name != new.name]
    print(f"pulse-jax: {estimator.name} has no confidence interval, so it runs with {', '.join(swaps)} beside the "
          "other methods", file=sys.stderr)
    return changed


def _params(args, config=None) -> dict:
    """The options' numbers as ``{name: value}`` (the run resolves them against its plug-ins); with the
    run's ``config``, the certificate's numbers too when its stopping rule is the certificate's."""
    from pulse_jax.engine.params import check_value

    out = {"delta": check_value("delta", args.delta, "--delta"), "cs_simultaneous": 1.0 if args.bounds == "all" else 0.0}
    if args.exploration is not None:   # the index rule's number (rule.exploration)
        out["exploration"] = args.exploration
    stop, numbers = _certificate(args)
    if config is not None and stop is not None and config.stop is stop:
        out = _certificate_levels(args, {**out, **numbers}, stop, config.n_models)
    return out


def _run_all(scores, V, config, methods, args, names):
    from pulse_jax.simulation import simulate

    results = {}
    for name, estimator in methods.items():
        method_config = _for_method(config, estimator, alone=len(methods) == 1)
        results[name] = simulate(scores, method_config, estimator, params=_params(args, method_config),
                                 V=V if estimator.uses_predictions else None, reps=args.reps,
                                   seed=args.seed, chunk_size=args.chunk_size,
                                   progress=_simulation_progress(args, name), model_names=names)
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


def _finish(results, out, title, inputs=()):
    from pulse_jax.analysis import report

    _say_ties(next(iter(results.values())))
    print(report.comparison_table(results))
    paths = report.write_results(results, out, title=title, inputs=inputs)
    for method, r in results.items():
        print(f"  {method:<6} {r.reps} repetitions in {r.seconds:.1f} s (of which compilation {r.compile_seconds:.1f} s)")
    print(f"results: {paths['summary']}  plot: {paths['plot']}  provenance: {paths['provenance']}")


def _check_out_dir(path, force: bool = False, option="--out") -> None:
    """Before any computation: the results directory is a directory (or does not exist yet), and an
    existing one is empty unless ``--force`` allows replacing its results. Nothing is removed here: the
    writer removes the files its folder's ``provenance.json`` lists, and only those, when the results are
    ready (`pulse_jax.io.files.remove_previous_outputs`)."""
    out = Path(path)
    require(not out.exists() or out.is_dir(), f"{option} {out}: exists and is not a directory")
    if not out.is_dir():
        return
    entries = sorted(p.name for p in out.iterdir())
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    require(not entries or force, f"{option} {out}: already holds {len(entries)} file(s) ({shown}); pass --force to "
                                  "replace the results pulse-jax wrote there, or give another folder")


def _check_report_dir(out: Path, log: Path, force: bool) -> None:
    """``select``'s report folder: new, empty, or holding this same log's report (a resumed run writes it
    again); another run's results need ``--force``."""
    require(not out.exists() or out.is_dir(), f"--report {out}: exists and is not a directory")
    if not out.is_dir() or force or not any(out.iterdir()):
        _check_out_dir(out, force, "--report")
        return
    try:
        previous = json.loads((out / "report.json").read_text(encoding="utf-8")).get("log")
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous != str(log.resolve()):
        _check_out_dir(out, False, "--report")


def _hash_inputs(*paths) -> list[dict]:
    """The input files' provenance records, taken now, as they are read."""
    from pulse_jax.io import provenance

    return provenance.hash_inputs(*paths)


def cmd_demo(args) -> None:
    from pulse_jax import synthetic
    from pulse_jax.stats import factorization

    _check_run_args(args)
    _resolve_defaults(args, "built-in")
    _check_out_dir(args.out, args.force)
    methods = _methods(args.method)
    bench = synthetic.make_benchmark(seed=args.seed)
    m, n = bench.scores.shape
    config = _config(args, m, n, default_budget=m * args.batch_size * args.init_batches + BUILTIN_BANDIT_CELLS)
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
    from pulse_jax.io import data

    _check_run_args(args)
    _resolve_defaults(args, "file")
    _check_out_dir(args.out, args.force)
    methods = _methods(args.method)
    _one_side_information(args)
    inputs = _hash_inputs(args.scores, args.train, args.embeddings, args.hparams)
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
    _finish(results, args.out, f"{Path(args.scores).name}: {m} models x {n} examples",
            inputs=inputs)


def _one_side_information(args) -> None:
    """``--embeddings`` is V itself: ``--train`` / ``--hparams`` (what V would be fitted from) beside it
    would be ignored, so they are refused."""
    extra = [o for o, v in (("--train", args.train), ("--hparams", getattr(args, "hparams", None))) if v]
    require(not (args.embeddings and extra), f"--embeddings gives the example embeddings directly, so {' and '.join(extra)} "
                                             "would be ignored; give --embeddings, or --train (with --hparams)")


def _check_side_information(args, cand, n) -> None:
    """``--embeddings`` / ``--train`` checked against the candidates without fitting anything."""
    from pulse_jax.io import data

    _one_side_information(args)
    if args.embeddings:
        _load_embeddings(args.embeddings, cand, n)
    if args.train:
        data.align_train(cand, data.load(args.train))


def _load_embeddings(path, cand, n):
    path = Path(path)
    require(path.is_file(), f"{path}: no such file")
    try:
        V = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PulseInputError(f"--embeddings {path}: not a .npy array file "
                              f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    require(isinstance(V, np.ndarray) and V.dtype.kind in "biuf", f"--embeddings {path}: expected a numeric .npy array")
    require(V.ndim == 2 and V.shape[0] == n,
            f"{path}: embeddings must have shape ({n}, rank) to match {cand.source}, got {V.shape}")
    require(V.shape[1] >= 1, f"--embeddings {path}: the embeddings have rank 0 (shape {V.shape}); give at least one "
                             "column")
    require(np.isfinite(V).all(), f"--embeddings {path}: contains NaN or inf")
    return V


def _side_information(args, cand, n):
    """V from --embeddings, or fitted on --train (aligned to the candidates' examples)."""
    from pulse_jax.stats import factorization
    from pulse_jax.io import data

    _one_side_information(args)
    if args.embeddings:
        return _load_embeddings(args.embeddings, cand, n)
    train = data.align_train(cand, data.load(args.train))
    rank, settings = _fit_rank(args, train.scores.shape), factorization.DEFAULT_STAGE0
    if getattr(args, "hparams", None):
        from pulse_jax import tuning

        rank, settings = tuning.load_hparams(args.hparams)
    return factorization.fit_example_embeddings(train.scores, rank=rank, settings=settings, seed=args.seed)


def _fit_rank(args, shape) -> int:
    """The embeddings' rank: the default is capped at what the history allows (with a note); a rank
    given with ``--rank`` is used as given (and refused, naming the limit, when too large)."""
    limit = min(shape)
    if args.rank > limit and "rank" in getattr(args, "defaulted", ()):
        print(f"pulse-jax: note: --rank {args.rank} (the default) needs at least {args.rank} historical models; "
              f"--train has {shape[0]} models x {shape[1]} examples, so rank {limit} is used", file=sys.stderr)
        return limit
    return args.rank


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
    return grid, baseline


def _sweep_data(args, method, estimator):
    """``(scores, model names, title, default budget, V, input files)`` of a sweep."""
    from pulse_jax import synthetic
    from pulse_jax.stats import factorization
    from pulse_jax.io import data

    _one_side_information(args)
    inputs = _hash_inputs(args.scores, args.train, args.embeddings, getattr(args, "hparams", None))
    if args.scores is None:
        require(not (args.train or args.embeddings), "--train/--embeddings need --scores (the built-in benchmark "
                                                     "brings its own train split)")
        bench = synthetic.make_benchmark(seed=args.seed)
        m = bench.scores.shape[0]
        V = factorization.fit_example_embeddings(bench.train, rank=args.rank, seed=args.seed) \
            if estimator.uses_predictions else None
        default_budget = m * args.batch_size * args.init_batches + BUILTIN_BANDIT_CELLS
        return bench.scores, bench.models, bench.description, default_budget, V, ()
    cand = data.handle_missing(data.load(args.scores), args.missing)
    _say_missing(cand)
    m, n = cand.shape
    V = None
    if estimator.uses_predictions:
        require(args.train or args.embeddings, f"--method {method} needs side information: pass --train FILE or "
                                               "--embeddings FILE (or use --method ucbe)")
        V = _side_information(args, cand, n)
    return (cand.scores, cand.models, f"{Path(args.scores).name}: {m} models x {n} examples",
            max(m * args.batch_size * args.init_batches, (m * n) // 4), V, inputs)


def cmd_sweep(args) -> None:
    from pulse_jax.sweeps import sweep

    _check_run_args(args)
    require(0 < args.target < 1, f"--target must lie in (0, 1), got {args.target}")
    _resolve_defaults(args, "built-in" if args.scores is None else "file")
    _check_out_dir(args.out, args.force)
    methods = _methods(args.method)
    require(len(methods) == 1, f"--method: a sweep runs one method, got {', '.join(methods)}")
    (method, estimator), = methods.items()
    plugins = (estimator, _plugin("sampling rule", args.rule, "--rule"), _plugin("stopping rule", args.stop, "--stop"))
    grid, baseline = _sweep_grid(args, plugins)
    scores, names, title, default_budget, V, inputs = _sweep_data(args, method, estimator)
    m, n = scores.shape
    config = _for_method(_config(args, m, n, default_budget), estimator, alone=True)
    points = int(np.prod([len(values) for values in grid.values()]))
    print(title)
    print(f"sweep of {method}: {points} points x {args.reps} repetitions = {points * args.reps:,} runs as one "
          f"program; budget {config.budget:,} cells, batch {config.batch_size}, refit every {config.refit_every}")
    if points > LARGE_SWEEP:
        print(f"pulse-jax: {points:,} points x {args.reps} repetitions = {points * args.reps:,} runs: this can take a "
              f"long time (Ctrl-C stops it); the table below shows the {SHOWN_ROWS} best points, sweep.csv holds "
              "every one", file=sys.stderr)
    result = sweep(scores, config, estimator, grid, args.reps, args.seed, V=V, base=_params(args, config),
                   baseline=baseline, chunk_size=args.chunk_size, progress=_simulation_progress(args, "sweep"),
                   model_names=names)
    targets = tuple(sorted({0.9, 0.95, args.target}))
    rows = result.table(targets)
    _say_ties(result.results[0])
    print(result.format_table(_shown(rows, args.target), target=args.target))
    print("(savings: +x% needs x% fewer cells than the baseline point to reach the target; -x%: more)")
    if len(rows) > SHOWN_ROWS:
        print(f"({SHOWN_ROWS} of {len(rows):,} points: the baseline and the best by cells to the target; every point "
              "is in sweep.csv)")
    shown = ", ".join(f"{k}={v:g}" if v is not None else f"{k}=nan" for k, v in result.values(result.baseline).items())
    print(f"savings are against point {result.baseline} ({shown}): {result.baseline_reason}")
    paths = result.write(args.out, targets, figure_target=args.target, rows=rows, inputs=inputs)
    print(f"{points} points x {args.reps} repetitions in {result.seconds:.1f} s (of which compilation "
          f"{result.compile_seconds:.1f} s, once)")
    print(f"results: {paths['json']}  {paths['csv']}  figure: {paths.get('figure')}")


#: A sweep with more points than this says so before it runs, and prints `SHOWN_ROWS` rows.
LARGE_SWEEP, SHOWN_ROWS = 1000, 20


def _shown(rows: list[dict], target: float) -> list[dict]:
    """All rows of a small sweep; of a large one, the baseline and the best by cells to the target."""
    if len(rows) <= SHOWN_ROWS:
        return rows
    key = f"budget_to_{target * 100:g}"
    ranked = sorted((r for r in rows if not r["baseline"]),
                    key=lambda r: (r[key] is None, r[key] if r[key] is not None else 0, -r["accuracy"]))
    return [r for r in rows if r["baseline"]] + ranked[:SHOWN_ROWS - 1]


def _numbers(text: str, name: str, kind=float) -> tuple:
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PulseInputError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    require(values, f"--{name}: no value given")
    return values


def cmd_tune(args) -> None:
    from pulse_jax import tuning
    from pulse_jax.io import data

    from pulse_jax.stats.seeds import seed_key

    seed_key(args.seed, "--seed")
    _check_writable_file(args.out, "--out")
    require(args.force or not files.exists(args.out), f"--out {args.out}: exists; pass --force to write over it")
    train = data.load(args.train)
    grid = {"rank": _numbers(args.ranks, "ranks", int), "lam": _numbers(args.lams, "lams"),
            "lr": _numbers(args.lrs, "lrs"), "epochs": _numbers(args.epochs, "epochs", int)}

    lines = None if getattr(args, "quiet", False) or sys.stderr.isatty() else _Lines()

    def progress(done, total):
        if _progress(args):
            sys.stderr.write(f"\r  cross-validation: {done}/{total} settings" + ("\n" if done == total else ""))
            sys.stderr.flush()
        elif lines is not None:
            lines(f"  cross-validation: {done}/{total} settings", done == total)

    result = tuning.cross_validate(train.scores, grid, folds=args.folds, seed=args.seed, progress=progress)
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
        text = p.read_text(encoding="utf-8-sig")     # a byte-order mark is not part of the first name
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
    require(count < 2**31, f"--examples {text}: more examples than a run can index (at most {2**31 - 1:,})")
    return count


def _lm_eval_scorer(args, models):
    """``(scorer, examples)`` for ``select --lm-eval-task``: the models are lm-eval specs, the examples the
    task's documents (all of them, or the first ``--examples`` / those listed)."""
    from pulse_jax.io import harness

    scorer = harness.LmEvalScorer(args.lm_eval_task, models, metric=args.lm_eval_metric,
                                  filter=args.lm_eval_filter, include_path=args.lm_eval_include,
                                  cache_dir=str(args.log) + ".lm-eval-cache", plugins=args.lm_eval_plugin,
                                  device=args.lm_eval_device)
    return scorer, _task_examples(args.examples, scorer.doc_ids, args.lm_eval_task, "document", _document_id)


def _document_id(text):
    """An lm-eval document id as ``--examples`` lists it (an integer)."""
    try:
        return int(text)
    except ValueError:
        raise PulseInputError(f"--examples: lm-eval examples are document ids (integers), got {text!r}") from None


def _task_examples(option, ids, task, noun, parse):
    """What ``select`` evaluates of a harness task's ``ids``: all of them, the first ``--examples N``, or
    those the ``--examples`` file lists (``parse`` reads one listed id; each must be one of ``ids``)."""
    if option is None:
        return ids
    chosen = _examples_option(option)
    if isinstance(chosen, int):
        require(chosen <= len(ids), f"--examples {chosen}: the task {task!r} has {len(ids)} {noun}s")
        return ids[:chosen]
    known = set(ids)
    listed = [parse(x) for x in chosen]
    bad = [x for x in listed if x not in known]
    if bad:
        raise PulseInputError(f"--examples {option}: no {noun} {bad[0]!r} in {task!r} ({len(ids)} {noun}s)")
    return listed


def _scorer(args, models):
    """``(evaluate, examples)`` from --evaluate, --lm-eval-task or --inspect-task (exactly one)."""
    require([args.evaluate, args.lm_eval_task, args.inspect_task].count(None) == 2,
            "give one way to score: --evaluate package.module:function, --lm-eval-task TASK or --inspect-task "
            "FILE.py@TASK")
    if args.lm_eval_task:
        return _lm_eval_scorer(args, models)
    if args.inspect_task:
        return _inspect_scorer(args, models)
    require(args.examples is not None, "--examples: give the number of examples or a file of example ids")
    return _load_evaluate(args.evaluate), _examples_option(args.examples)


def _inspect_scorer(args, models):
    """``(scorer, examples)`` for ``select --inspect-task``: the models are Inspect model names, the
    examples the task's sample ids (all of them, or the first ``--examples`` / those listed)."""
    from pulse_jax.io import inspect_harness

    scorer = inspect_harness.InspectScorer(args.inspect_task, models,
                                           log_dir=args.inspect_log_dir or str(args.log) + ".inspect",
                                           scorer=args.inspect_scorer, metric=args.inspect_metric,
                                           value_map=inspect_harness.parse_value_map(args.value_map))
    by_text = {str(i): i for i in scorer.sample_ids}
    return scorer, _task_examples(args.examples, scorer.sample_ids, args.inspect_task, "sample",
                                  lambda text: by_text.get(text, text))


def _meter(args, models, evaluate):
    """The money side of ``select`` (None without --price, --cost-per-call or --budget-usd)."""
    if not (args.price or args.cost_per_call is not None or args.budget_usd is not None):
        return None
    from pulse_jax.live import money

    require(args.price or args.cost_per_call is not None,
            "--budget-usd needs prices: --price MODEL=IN/OUT (dollars per million tokens) or --cost-per-call")
    prices = money.parse_prices(args.price, models, args.cost_per_call)
    history = None
    if args.usage:
        from pulse_jax.io import inspect_harness

        history = inspect_harness.read_inspect(args.usage, scorer=args.inspect_scorer, metric=args.inspect_metric,
                                               value_map=inspect_harness.parse_value_map(args.value_map))
    measured = getattr(evaluate, "tokens", None)
    require(measured is not None or not any(p.per_token for p in prices.values()),
            "--price in tokens needs a scorer that reports tokens (--inspect-task); price an --evaluate scorer "
            "per call with --cost-per-call")
    expected = money.expected_cost_per_cell(models, prices, history)
    return money.Meter(models, prices, expected, budget_usd=args.budget_usd, tokens=measured)


def _check_live_numbers(args) -> None:
    """``select``'s own numbers, before anything is read or written."""
    require(args.grace is None or (math.isfinite(args.grace) and args.grace >= 0),
            f"--grace must be >= 0 seconds, got {args.grace}")
    require(args.concurrency >= 1, f"--concurrency must be >= 1, got {args.concurrency}")
    require(args.retries >= 0, f"--retries must be >= 0, got {args.retries}")
    _at_most(args.concurrency, "--concurrency", 1024)
    _at_most(args.retries, "--retries", 1000)
    for option, value in (("--retry-wait", args.retry_wait), ("--retry-max-wait", args.retry_max_wait)):
        require(math.isfinite(value) and value >= 0, f"{option} must be a number of seconds >= 0, got {value}")


def _say_resume(selector, log) -> None:
    """What a resumed run starts from: the cells in the log, the paid batches it tells from the log, and
    the batches that were in flight, which it asks again."""
    kept = selector.paid_batches
    again = sum(selector.paid_scores(r) is None for r in selector.pending())
    print(f"resuming {log}: {selector.spent:,} cells already evaluated"
          + (f"; {kept} batch(es) paid before are told from the log" if kept else "")
          + (f"; {again} batch(es) that were in flight will be asked again" if again else ""))


def _live_progress(args):
    """``run``'s ``progress``: a status line on a terminal, plain lines otherwise (`_Lines`)."""
    if args.quiet:
        return False
    if sys.stderr.isatty():
        return True
    lines = _Lines("  select: started")

    def report(selector, in_flight: int, seconds: float):
        lines(f"  select: {selector.spent:,}/{selector.config.budget:,} cells, {in_flight} in flight, {seconds:.0f} s")

    return report


def _read_models(args) -> list[str]:
    """``--models``: at least two names, none twice, more than a top-k or tie-group certificate names."""
    models = _read_lines(args.models, "--models")
    repeated = sorted({m for m in models if models.count(m) > 1})
    require(not repeated, f"--models {args.models}: {len(repeated)} name(s) appear more than once: "
                          f"{', '.join(map(repr, repeated[:5]))}{', ...' if len(repeated) > 5 else ''}")
    require(len(models) >= 2, f"--models {args.models}: {len(models)} model; a selection needs at least 2 candidates")
    _check_certificate_size(args, len(models))
    return models


def _live_rule(args, method: str, estimator):
    """``select``'s sampling rule; a method without an interval samples by the index rule under the
    default rule (which needs one), with a note. An explicit ``--rule`` is kept (and checked)."""
    rule = _rule(args)
    if not estimator.has_interval and not args.rule_given and getattr(rule, "needs_interval", False):
        print(f"note: --method {method} has no confidence interval, so it samples by the index rule ucbe instead of "
              f"the default {args.rule}", file=sys.stderr)
        rule = _plugin("sampling rule", "ucbe", "--rule")
    return rule


def cmd_select(args) -> None:
    from pulse_jax import live
    from pulse_jax.io import data

    from pulse_jax.stats.seeds import seed_key

    seed_key(args.seed, "--seed")
    _resolve_defaults(args, "live")
    _check_numbers(args)
    _check_live_numbers(args)
    inputs = _hash_inputs(args.models, args.examples, args.train)
    models = _read_models(args)
    _check_first_look(args.budget, len(models), args, f"in {args.models}")
    evaluate, examples = _scorer(args, models)
    methods = _methods(args.method)
    require(len(methods) == 1, f"--method: a selection runs one method, got {', '.join(methods)}")
    (method, estimator), = methods.items()
    rule = _live_rule(args, method, estimator)
    certificate, numbers = _certificate(args)
    stop = certificate or (None if args.stop is None else _plugin("stopping rule", args.stop, "--stop"))
    numbers = _params(args) if certificate is None else _certificate_levels(args, {**_params(args), **numbers},
                                                                             certificate, len(models))
    require(not Path(args.log).is_dir(), f"--log {args.log}: is a directory; give a file name")
    require(Path(args.log).parent.is_dir(), f"--log {args.log}: its folder {Path(args.log).parent} does not exist; "
                                            "create it first (a misspelt folder would otherwise start a new log)")
    saved = Path(args.log).with_name(Path(args.log).name + ".embeddings.npy")   # a resumed run's side information
    require(args.train or saved.exists() or not estimator.uses_predictions,
            f"--method {method} needs side information: pass --train FILE (historical models' scores on the same "
            "examples), or use --method ucbe")
    train = None
    if args.train and estimator.uses_predictions:
        train = data.load(args.train)
        args.rank = _fit_rank(args, train.scores.shape)
    out = Path(args.report) if args.report else Path(args.log).with_name(Path(args.log).stem + "_report")
    _check_report_dir(out, Path(args.log), args.force)
    selector = live.Selector(models, examples, args.budget, method=estimator, batch_size=args.batch_size,
                             init_batches=args.init_batches, refit_every=args.refit_every, seed=args.seed,
                             train=train, rank=args.rank, log=args.log, rule=rule, params=numbers,
                             cs_grid=_cs_grid(args), stop=stop)
    meter = _meter(args, models, evaluate)
    if meter is not None:
        meter.update(selector.evaluated())
        print(meter.cost_line(args.budget, len(models) * args.batch_size * args.init_batches)
              + (f"; {meter.line()} before this run" if selector.spent else ""))
    allow = None if meter is None or meter.budget_usd is None else \
        (lambda cells: meter.allows(selector.evaluated(), cells))
    try:
        if selector.spent:
            _say_resume(selector, args.log)
        try:
            report = live.run(evaluate, selector, concurrency=args.concurrency, retries=args.retries,
                              retry_wait=args.retry_wait, retry_max_wait=args.retry_max_wait,
                              progress=_live_progress(args), grace=args.grace, allow=allow)
        except live.EvaluationError as err:
            raise PulseInputError(f"{err}. The {selector.spent:,} cells told so far are safe in {args.log}; "
                                  "run the same command again to continue") from None
        except live.Interrupted:
            raise
        except KeyboardInterrupt:   # before the run started (replay, compilation): nothing was in flight
            print(f"\ninterrupted: {selector.spent:,} cells are safe in {args.log}; run the same command again "
                  "to continue", file=sys.stderr)
            raise
    finally:
        selector.close()
    if meter is not None:
        meter.update(selector.evaluated())
        report = dataclasses.replace(report, spend=meter.summary(), spend_line=meter.line(),
                                     finished=report.finished or meter.stopped)   # the money budget ended it
    _write_select_report(out, report, selector, args, inputs)


def _write_select_report(out: Path, report, selector, args, inputs) -> None:
    """``report.md``, ``report.json`` (naming its log), ``estimates.png`` and ``provenance.json``."""
    out.mkdir(parents=True, exist_ok=True)
    from pulse_jax.io import files, provenance
    from pulse_jax.io.provenance import clean_json

    files.remove_previous_outputs(out)
    files.write_atomically(out / "report.md", report.to_markdown())
    files.write_atomically(out / "report.json", json.dumps(clean_json({**report.to_dict(),
                                                                       "log": str(Path(args.log).resolve())}), indent=2))
    report.plot(out / "estimates.png")
    provenance.write(out, provenance.collect(config=selector.config, params=selector.params, seed=args.seed,
                                             inputs=inputs, method=selector.method,
                                             extra={"log": str(Path(args.log).resolve())}),
                     files=["report.md", "report.json", "estimates.png"])
    print(report.to_markdown())
    print(f"report: {out / 'report.md'} (+ report.json, estimates.png, provenance.json)")


def cmd_import(args) -> None:
    from pulse_jax.io import data, harness

    out = Path(args.out)
    require(not out.is_dir(), f"--out {out}: is a directory; give a .csv file name")
    require(args.force or not files.exists(out), f"--out {out}: exists; pass --force to write over it")
    _check_writable_file(args.out, "--out")
    if args.source == "lm-eval":
        matrix = harness.read_lm_eval(args.folders, args.task, args.metric, args.filter)
    elif args.source == "inspect":
        from pulse_jax.io import inspect_harness

        tokens = Path(args.tokens) if args.tokens else out.with_name(out.stem + ".tokens.csv")
        require(args.force or not files.exists(tokens), f"--tokens {tokens}: exists; pass --force to write over it")
        logs = inspect_harness.read_inspect(args.logs, task=args.task, scorer=args.scorer, metric=args.metric,
                                            epochs=args.epochs,
                                            value_map=inspect_harness.parse_value_map(args.value_map))
        matrix = logs.scores
        inspect_harness.save_tokens(logs, tokens)
        cells = int((~np.isnan(logs.input_tokens)).sum())
        print(f"tokens: {np.nansum(logs.input_tokens):,.0f} input + {np.nansum(logs.output_tokens):,.0f} output over "
              f"{cells:,} cells (scorer {logs.scorer!r}); wrote {tokens}")
    else:
        matrix = harness.read_long(args.file, model=args.model_column, example=args.example_column,
                                   score=args.score_column)
    data.save_csv(matrix, out)
    print(f"{matrix.source}: {harness.describe(matrix)}")
    print(f"wrote {out}")


def cmd_log(args) -> None:
    from pulse_jax.live import journal

    if args.action == "import":
        n = journal.import_jsonl(args.jsonl, args.log)
        print(f"wrote {args.log}: {n} batch(es) from {args.jsonl}")
        return
    if args.action == "export":
        require(args.jsonl == "-" or args.force or not files.exists(args.jsonl),
                f"--jsonl {args.jsonl}: exists; pass --force to write over it")
        header, records = journal.snapshot(args.log)
        require(header is not None, f"{args.log}: the log has no run yet")
        lines = journal.as_jsonl(header, records)
        if args.jsonl == "-":
            sys.stdout.write(lines)
        else:
            files.write_atomically(args.jsonl, lines)
            print(f"wrote {args.jsonl}: {len(records)} batch(es)", file=sys.stderr)
        return
    header, records = journal.snapshot(args.log)
    require(header is not None, f"{args.log}: the log has no run yet")
    told = [r for r in records if r["type"] == "tell"]
    paid = [r for r in records if r["type"] == "paid"]
    cells = sum(len(r["examples"]) for r in told)
    print(f"{args.log}: pulse-jax log; {journal.checks_of(header)}")
    print(f"  method {header.get('method')}, seed {header.get('seed')}, {_count(header.get('models'))} models x "
          f"{_count(header.get('examples'))} examples, budget {_count(header.get('budget'))}, batch "
          f"{header.get('batch_size')}")
    print(f"  told: {len(told):,} batch(es), {cells:,} cells; paid but not yet told: {len(paid)} batch(es), "
          f"{sum(len(r['examples']) for r in paid):,} cells")
    per_model = {}
    for r in told:
        per_model[r["model"]] = per_model.get(r["model"], 0) + len(r["examples"])
    for model, count in sorted(per_model.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {count:>8,}  {model}")


def _count(value) -> str:
    """A header's count for people: a list's length, an integer with separators, else as it is."""
    if isinstance(value, list):
        return f"{len(value):,}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def main(argv=None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:       # name the command they were given to, not the top level
        command = " ".join([args.command] + [getattr(args, name) for name in ("source", "action")
                                             if isinstance(getattr(args, name, None), str)])
        print(f"pulse-jax: error: {command}: unrecognized arguments: {' '.join(extra)} (see pulse-jax {command} "
              "--help)", file=sys.stderr)
        return 2
    given = sys.argv[1:] if argv is None else argv
    args.rule_given = any(a == "--rule" or a.startswith("--rule=") for a in given)
    args.stop_given = any(a == "--stop" or a.startswith("--stop=") for a in given)
    from pulse_jax.engine.compilation_cache import enable_compilation_cache

    enable_compilation_cache()
    try:
        commands = {"demo": cmd_demo, "simulate": cmd_simulate, "sweep": cmd_sweep, "tune": cmd_tune,
                    "select": cmd_select, "import": cmd_import, "log": cmd_log}
        commands[args.command](args)
    except PulseInputError as err:
        print(f"pulse-jax: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:   # a file we were told to read or write: say which, in one line
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(f"pulse-jax: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        from pulse_jax.live.runner import Interrupted

        if isinstance(err, Interrupted):
            print(f"\npulse-jax: {err}", file=sys.stderr)
            return _exit_now(err.exit_code) if argv is None else err.exit_code
        print("pulse-jax: interrupted", file=sys.stderr)
        return _exit_now(130) if argv is None else 130
    return 0


def _exit_now(code: int) -> int:
    """End the program at once after an interruption (everything paid for is committed and the log
    closed): the interpreter's shutdown would stop threads still running -- a scorer call abandoned in
    flight, a library's background thread -- in the middle of native code, which can abort the process
    instead of exiting with ``code``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
    return code   # not reached


if __name__ == "__main__":
    sys.exit(main())
