"""``pulse-jax select``: live selection of the best real model, paying for one batch at a time."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

from pulse_jax.cli.inputs import fit_rank, read_lines
from pulse_jax.cli.options import (PLUGIN_HELP, HelpFormatter, add_bandit_options, add_stopping_options, at_most,
                                   certificate_levels, certificate_of, check_certificate_size, check_first_look,
                                   check_numbers, check_params, cs_grid, numbers_of, parse_methods, plugin_option, resolve_defaults,
                                   rule_option)
from pulse_jax.cli.output import Lines, check_out_dir, hash_inputs
from pulse_jax.cli.scorers import scorer_of
from pulse_jax.errors import PulseInputError, require


def _add_scoring_options(sel) -> None:
    """How a batch is scored (lm-eval, Inspect) and what it costs (prices, a money budget)."""
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


def add(sub) -> None:
    sel = sub.add_parser("select", formatter_class=HelpFormatter,
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
    _add_scoring_options(sel)
    sel.add_argument("--log", required=True, help="the log (an SQLite database, e.g. run.db); run the same command "
                                                 "again to resume")
    sel.add_argument("--train", default=None, help="historical scores on the same examples (CSV/NPZ)")
    add_bandit_options(sel, methods_help=f"the estimator: pulse_hedged (PULSE with lambda 1/2, raw and proxy "
                                          f"sequences), pulse_certify (lambda 1/2, the proxy sequence alone), pulse "
                                          f"(the paper's), ucbe, naive, or {PLUGIN_HELP} (default: pulse_hedged)",
                        live=True)
    # Live selection wants a certified answer for the fewest paid calls: the configuration that certifies
    # with the fewest cells, and never more than UCB-E's, on every data set measured
    # (docs/benchmarks/certify_betting.md); simulations keep the paper's.
    sel.set_defaults(method="pulse_hedged", rule_default="top_two_interval", bounds_default="certification",
                     sequence="betting")
    sel.add_argument("--concurrency", type=int, default=None,
                     help="batches evaluated at once (thread pool; default 16 with --evaluate, 1 with "
                          "--inspect-task or --lm-eval-task, whose evals run one at a time). Each ask counts "
                          "the batches in flight, so 16 pay a few percent more cells than 1 and finish many "
                          "times sooner (docs/live.md)")
    sel.add_argument("--call-timeout", type=float, default=None,
                     help="seconds a scorer call may run; one still running then counts as failed and is retried "
                          "(default: no limit)")
    sel.add_argument("--retries", type=int, default=3,
                     help="retries of a failing evaluate call (rate limits, 5xx answers); only a failure that "
                          "outlasts them stops the run")
    sel.add_argument("--retry-wait", type=float, default=1.0,
                     help="seconds before the first retry; doubled each time, times a random factor in [0.5, 1] "
                          "(a scorer's own retry-after hint is followed instead)")
    sel.add_argument("--retry-max-wait", type=float, default=60.0,
                     help="the longest wait between two attempts (seconds)")
    add_stopping_options(sel)
    sel.add_argument("--report", default=None, help="report directory (default: <log name>_report beside the log); "
                                                    "a report of another log there needs --force")
    sel.add_argument("--force", action="store_true", help="replace the results in a --report folder that holds "
                                                         "another run's")
    sel.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> None:
    from pulse_jax import live
    from pulse_jax.stats.seeds import seed_key

    seed_key(args.seed, "--seed")
    resolve_defaults(args, "live")
    check_numbers(args)
    check_live_numbers(args)
    inputs = hash_inputs(args.models, args.examples, args.train)
    models = _read_models(args)
    check_first_look(args.budget, len(models), args, f"in {args.models}")
    evaluate, examples = scorer_of(args, models)
    estimator, rule, stop, numbers = plan(args, len(models))
    train = live_side_information(args, estimator)
    out = Path(args.report) if args.report else Path(args.log).with_name(Path(args.log).stem + "_report")
    check_report_dir(out, Path(args.log), args.force)
    selector = live.Selector(models, examples, args.budget, method=estimator, batch_size=args.batch_size,
                             init_batches=args.init_batches, refit_every=args.refit_every, seed=args.seed,
                             train=train, rank=args.rank, log=args.log, rule=rule, params=numbers,
                             cs_grid=cs_grid(args), stop=stop, concurrency=args.concurrency)
    meter = meter_of(args, models, getattr(evaluate, "tokens", None))
    if meter is not None:
        meter.update(selector.evaluated())
        print(meter.cost_line(args.budget, len(models) * args.batch_size * args.init_batches)
              + (f"; {meter.line()} before this run" if selector.spent else ""))
    try:
        report = _drive(args, selector, evaluate, meter)
    finally:
        selector.close()
    if meter is not None:
        meter.update(selector.evaluated())
        report = dataclasses.replace(report, spend=meter.summary(), spend_line=meter.line(),
                                     finished=report.finished or meter.stopped)   # the money budget ended it
    _write_select_report(out, report, selector, args, inputs)


def plan(args, n_models: int):
    """``(estimator, rule, stop, numbers)`` of the options, each checked (``stop`` None: the Selector's
    default, certified for a method with an interval, else budget)."""
    methods = parse_methods(args.method)
    require(len(methods) == 1, f"--method: a selection runs one method, got {', '.join(methods)}")
    (method, estimator), = methods.items()
    rule = _live_rule(args, method, estimator)
    certificate, numbers = certificate_of(args)
    stop = certificate or (None if args.stop is None else plugin_option("stopping rule", args.stop, "--stop"))
    default_stop = "certified" if estimator.has_interval else "budget"   # the Selector's default
    check_params(args, [(estimator, rule, stop or plugin_option("stopping rule", default_stop, "--stop"))])
    numbers = numbers_of(args) if certificate is None else certificate_levels(args, {**numbers_of(args), **numbers},
                                                                             certificate, n_models)
    return estimator, rule, stop, numbers


def live_side_information(args, estimator):
    """The ``--train`` scores a method with predictions fits its embeddings on (None: the log keeps them,
    or the method needs none); the log's folder checked first."""
    from pulse_jax.io import data

    require(not Path(args.log).is_dir(), f"--log {args.log}: is a directory; give a file name")
    require(Path(args.log).parent.is_dir(), f"--log {args.log}: its folder {Path(args.log).parent} does not exist; "
                                            "create it first (a misspelt folder would otherwise start a new log)")
    saved = Path(args.log).with_name(Path(args.log).name + ".embeddings.npy")   # a resumed run's side information
    require(args.train or saved.exists() or not estimator.uses_predictions,
            f"--method {estimator.name} needs side information: pass --train FILE (historical models' scores on "
            "the same examples), or use --method ucbe")
    if not (args.train and estimator.uses_predictions):
        return None
    train = data.load(args.train)
    args.rank = fit_rank(args, train.scores.shape)
    return train


def _drive(args, selector, evaluate, meter):
    """Run the selection to its end; an interruption or a failed call says the cells told are safe."""
    from pulse_jax import live

    allow = None if meter is None or meter.budget_usd is None else \
        (lambda cells: meter.allows(selector.evaluated(), cells))
    if selector.spent:
        _say_resume(selector, args.log)
    try:
        return live.run(evaluate, selector, concurrency=args.concurrency, retries=args.retries,
                        retry_wait=args.retry_wait, retry_max_wait=args.retry_max_wait,
                        progress=_live_progress(args), grace=args.grace, allow=allow,
                        call_timeout=args.call_timeout)
    except live.EvaluationError as err:
        raise PulseInputError(f"{err}. The {selector.spent:,} cells told so far are safe in {args.log}; "
                              "run the same command again to continue") from None
    except live.Interrupted:
        raise
    except KeyboardInterrupt:   # before the run started (replay, compilation): nothing was in flight
        print(f"\ninterrupted: {selector.spent:,} cells are safe in {args.log}; run the same command again "
              "to continue", file=sys.stderr)
        raise


def check_report_dir(out: Path, log: Path, force: bool) -> None:
    """``select``'s report folder: new, empty, or holding this same log's report (a resumed run writes it
    again); another run's results need ``--force``."""
    require(not out.exists() or out.is_dir(), f"--report {out}: exists and is not a directory")
    if not out.is_dir() or force or not any(out.iterdir()):
        check_out_dir(out, force, "--report")
        return
    try:
        previous = json.loads((out / "report.json").read_text(encoding="utf-8")).get("log")
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous != str(log.resolve()):
        check_out_dir(out, False, "--report")


def meter_of(args, models, tokens):
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
    measured = tokens
    require(measured is not None or not any(p.per_token for p in prices.values()),
            "--price in tokens needs a scorer that reports tokens (Inspect); price an --evaluate scorer "
            "per call with --cost-per-call")
    expected = money.expected_cost_per_cell(models, prices, history)
    return money.Meter(models, prices, expected, budget_usd=args.budget_usd, tokens=measured)


def check_live_numbers(args) -> None:
    """``select``'s own numbers, before anything is read or written."""
    require(args.grace is None or (math.isfinite(args.grace) and args.grace >= 0),
            f"--grace must be >= 0 seconds, got {args.grace}")
    harness = getattr(args, "inspect_task", None) or getattr(args, "lm_eval_task", None)
    if args.concurrency is None:
        from pulse_jax.live import CONCURRENCY

        args.concurrency = 1 if harness else CONCURRENCY
    require(args.concurrency >= 1, f"--concurrency must be >= 1, got {args.concurrency}")
    require(not harness or args.concurrency == 1,
            f"--concurrency {args.concurrency}: an --inspect-task or --lm-eval-task scorer runs one eval at a "
            "time; leave --concurrency out (inside Inspect, select_best evaluates many samples at once)")
    require(args.retries >= 0, f"--retries must be >= 0, got {args.retries}")
    at_most(args.concurrency, "--concurrency", 1024)
    at_most(args.retries, "--retries", 1000)
    require(args.call_timeout is None or (math.isfinite(args.call_timeout) and args.call_timeout > 0),
            f"--call-timeout must be a number of seconds > 0, got {args.call_timeout}")
    for option, value in (("--retry-wait", args.retry_wait), ("--retry-max-wait", args.retry_max_wait)):
        require(math.isfinite(value) and value >= 0, f"{option} must be a number of seconds >= 0, got {value}")


def _say_resume(selector, log) -> None:
    """What a resumed run starts from: the cells in the log, the paid batches it tells from the log, and
    the batches that were in flight, which it asks again."""
    kept = selector.paid_batches
    again = sum(selector.paid_scores(r) is None for r in selector.pending() if r.example_ids)
    print(f"resuming {log}: {selector.spent:,} cells already evaluated"
          + (f"; {kept} batch(es) paid before are told from the log" if kept else "")
          + (f"; {again} batch(es) ({selector.in_flight_cells:,} cells) that were in flight when the last run "
             "stopped will be asked again" if again else "")
          + ("; batches asked after the last logged one (in flight at a kill) are asked again" if not kept else ""))


def _live_progress(args):
    """``run``'s ``progress``: a status line on a terminal, plain lines otherwise (`Lines`)."""
    if args.quiet:
        return False
    if sys.stderr.isatty():
        return True
    lines = Lines("  select: started")

    def report(selector, in_flight: int, seconds: float):
        lines(f"  select: {selector.spent:,}/{selector.config.budget:,} cells, {in_flight} in flight, {seconds:.0f} s")

    return report


def _read_models(args) -> list[str]:
    """``--models``: at least two names, none twice, more than a top-k or tie-group certificate names."""
    models = read_lines(args.models, "--models")
    repeated = sorted({m for m in models if models.count(m) > 1})
    require(not repeated, f"--models {args.models}: {len(repeated)} name(s) appear more than once: "
                          f"{', '.join(map(repr, repeated[:5]))}{', ...' if len(repeated) > 5 else ''}")
    require(len(models) >= 2, f"--models {args.models}: {len(models)} model; a selection needs at least 2 candidates")
    check_certificate_size(args, len(models))
    return models


def _live_rule(args, method: str, estimator):
    """``select``'s sampling rule; a method without an interval samples by the index rule under the
    default rule (which needs one), with a note. An explicit ``--rule`` is kept (and checked)."""
    rule = rule_option(args)
    if not estimator.has_interval and not args.rule_given and getattr(rule, "needs_interval", False):
        print(f"note: --method {method} has no confidence interval, so it samples by the index rule ucbe instead of "
              f"the default {args.rule}", file=sys.stderr)
        rule = plugin_option("sampling rule", "ucbe", "--rule")
    return rule


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
