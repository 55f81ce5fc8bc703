"""``pulse-jax select``: live selection of the best real model, paying for one batch at a time."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from pulse_jax import choices
from pulse_jax.cli.inputs import read_lines
from pulse_jax.cli.options import PLUGIN_HELP, HelpFormatter, add_bandit_options, add_stopping_options
from pulse_jax.cli.output import Lines, hash_inputs
from pulse_jax.cli.scorers import scorer_of
from pulse_jax.errors import PulseInputError, require
from pulse_jax.live import report_files, runner_log


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
    sel.add_argument("--price", action="append", default=[], metavar="MODEL=DOLLARS|MODEL=IN/OUT",
                     help="a model's price: MODEL=DOLLARS per call (e.g. gpt-x=0.002), or MODEL=IN/OUT dollars per "
                          "million input/output tokens (e.g. gpt-x=0.15/0.60; needs a scorer that reports tokens); "
                          "* for every other model")
    sel.add_argument("--budget-usd", type=float, default=None,
                     help="the most the run may spend, in dollars: a batch that does not fit, at its model's price, "
                          "is not paid for")
    sel.add_argument("--cost-per-call", type=float, default=None, help="dollars per cell (added to --price)")
    sel.add_argument("--usage", action="append", default=[], metavar="LOGS",
                     help="Inspect logs (files or folders) of the task whose token counts estimate the cost")


def add(sub) -> None:
    sel = sub.add_parser("select", formatter_class=HelpFormatter,
                         help="pick the best real model, evaluating batches with your scorer",
                         description="Live selection: asks your scorer for one batch at a time, logs every "
                                     "paid-for score, resumes from the log, stops once the best is certified.")
    sel.add_argument("--models", required=True, help="text file, one candidate name per line")
    sel.add_argument("--examples", default=None,
                     help="number of examples N (the scorer gets ids 0..N-1 as ints), or a text file with one "
                          "example id per line (the scorer gets the lines as strings) (default with --lm-eval-task "
                          "or --inspect-task: every document or sample of the task)")
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
                                          f"(the paper's), ucbe, naive, or {PLUGIN_HELP} (default: pulse_hedged with --train or a resumed log's history; ucbe "
                                          "without history, with a note)",
                        source="live")
    # Live selection wants a certified answer for the fewest paid calls: the configuration that certifies
    # with the fewest cells, and never more than UCB-E's, on every data set measured
    # (docs/benchmarks/certify_betting.md); simulations keep the paper's.
    sel.set_defaults(rule_default="top_two_interval", bounds_default="certification",
                     sequence="betting")
    sel.add_argument("--gap-horizon", type=float, default=None,
                     help="bets tuned to each model's running gap, at this multiple of the draws it implies "
                          "(default 0.5 for a certificate about the best model, 0 otherwise: anytime bets; "
                          "valid at any value, docs/confidence.md)")
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
                          "outlasts them stops the run. An API that fails 30%% of calls wants 8 for a few hundred "
                          "calls (docs/live.md, Rate-limited APIs)")
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


def _plan_choices() -> tuple[str, ...]:
    """The ``select`` options a `pulse_jax.live.Plan` holds (the rest say where the models, examples and
    scores come from, or how progress is shown)."""
    from pulse_jax.live.plan import Plan

    return tuple(f.name for f in dataclasses.fields(Plan) if f.name != "spell")


def plan_of(args):
    """The `pulse_jax.live.Plan` of ``select``'s options, every choice checked in the options' words; an
    option left at a default the plan owns (``--rule``, ``--stop``, ``--delta``, ``--bounds``, ``--rank``,
    ...) is left out, so the plan's default applies."""
    from pulse_jax.live.plan import Plan

    values = {name: getattr(args, name) for name in _plan_choices() if getattr(args, name, None) is not None}
    for name in ("rule", "stop", "delta", "bounds"):
        if name not in getattr(args, "given", ()):
            values.pop(name, None)
    for name in getattr(args, "defaulted", ()):
        values.pop(name, None)
    return Plan.from_dict(values, spell=choices.flag)


def run(args) -> None:
    require(not args.value_map or args.inspect_task or args.usage,
            "--value-map reads Inspect score values (--inspect-task, --usage); an --evaluate or --lm-eval-task "
            "scorer returns numbers, so it would be ignored")
    for name in ("inspect_log_dir", "inspect_scorer", "inspect_metric"):
        require(getattr(args, name) is None or args.inspect_task,
                f"--{name.replace('_', '-')} is read by --inspect-task only; with --evaluate or --lm-eval-task it "
                "would be ignored")
    check_concurrency(args)
    plan = plan_of(args)
    inputs = hash_inputs(args.models, args.examples, args.train)
    models = _read_models(args)
    if _already_finished(args, plan, inputs, models):
        return
    plan.check_models(len(models), args.budget, f"in {args.models}")
    plan.side_information(plan.plugins()[0])   # the log's folder and the side information, before the scorer
    evaluate, examples = scorer_of(args, models)
    check = getattr(evaluate, "check", None)     # a scorer that can refuse its models or examples up front
    if callable(check):
        report_files.check_report_folder(plan)                   # the plan's own checks first, in the order they are made
        check(models, examples)
    meter = plan.meter(models, getattr(evaluate, "tokens", None), history=_usage(args, plan))
    selector = plan.selector(models, examples, where=f"in {args.models}",
                             cost=None if meter is None else meter.expected)
    if meter is not None:
        meter.update(selector.evaluated(), runner_log.asked_cells(selector))
        print(meter.cost_line(selector.config.budget, len(models) * plan.batch_size * plan.init_batches)
              + (f"; {meter.line()} before this run" if selector.spent else ""))
    try:
        report = _drive(args, plan, selector, evaluate, meter)
        if meter is not None:
            meter.update(selector.evaluated(), runner_log.asked_cells(selector))
            report = dataclasses.replace(report, spend=meter.summary(), spend_line=meter.line(),
                                         finished=report.finished or meter.stopped,   # the money budget ended it
                                         prices=tuple(meter.expected), spent_by_model=tuple(meter.by_model()))
        out = report_files.write_report(plan, report, selector, inputs=inputs)
        if report.finished:     # in the log while the run holds it: a copy written over it is found at close
            runner_log.mark_finished(selector, _finished_key(args, plan, inputs, models))
    finally:
        selector.close()
    runner_log.check_kept(selector)      # copied over after the last commit: found as the log is let go
    print(report.to_markdown())
    figures = "estimates.png, cost_accuracy.png" if selector.cost is not None else "estimates.png"
    print(f"report: {out / 'report.md'} (+ report.json, {figures}, provenance.json)")


def _drive(args, plan, selector, evaluate, meter):
    """Run the selection to its end; an interruption or a failed call says the cells told are safe."""
    from pulse_jax import live

    allow = None if meter is None or meter.budget_usd is None else \
        (lambda request: meter.fits(request.model, len(request.example_ids), selector.evaluated(),
                                    runner_log.asked_cells(selector)))
    if selector.resumed:     # also a log killed before its first batch was told: its calls are asked again
        _say_resume(selector, args.log)
    try:
        return live.run(evaluate, selector, progress=_live_progress(args),
                        allow=allow, **plan.run_options())
    except live.EvaluationError as err:
        raise PulseInputError(f"{err}. The {selector.spent:,} cells told so far are safe in {args.log}; "
                              "run the same command again to continue") from None
    except live.Interrupted:
        raise
    except KeyboardInterrupt:   # before the run started (replay, compilation): nothing was in flight
        print(f"\ninterrupted: {selector.spent:,} cells are safe in {args.log}; run the same command again "
              "to continue", file=sys.stderr)
        raise


def _usage(args, plan):
    """The token counts of ``--usage`` logs (None without them or without prices)."""
    if not (plan.usage and plan.has_money_side):
        return None
    from pulse_jax.harnesses import inspect_logs

    return inspect_logs.usage_history(plan.usage, args.inspect_scorer, args.inspect_metric,
                                      inspect_logs.parse_value_map(args.value_map))


def check_concurrency(args) -> None:
    """``--concurrency``'s default by scorer: 16 with ``--evaluate``, 1 with a harness scorer, whose
    evals run one at a time (more is refused)."""
    harness = getattr(args, "inspect_task", None) or getattr(args, "lm_eval_task", None)
    if args.concurrency is None:
        args.concurrency = 1 if harness else choices.CONCURRENCY
    require(not harness or args.concurrency == 1,
            f"--concurrency {args.concurrency}: an --inspect-task or --lm-eval-task scorer runs one eval at a "
            "time; leave --concurrency out (inside Inspect, select_best evaluates many samples at once)")


def _say_resume(selector, log) -> None:
    """What a resumed run starts from: the cells in the log, the paid batches it tells from the log, and
    the batches that were in flight, which it asks again."""
    held, unreturned = runner_log.resume_counts(selector)
    print(f"resuming {log}: {selector.spent:,} cells already evaluated; {held:,} cells paid for before are told from "
          f"the log; {unreturned:,} cells paid for whose calls never came back (in flight when the last run ended) are "
          "asked again")


def _live_progress(args):
    """``run``'s ``progress``: a status line on a terminal, plain lines otherwise (`Lines`)."""
    if args.quiet:
        return False
    if sys.stderr.isatty():
        return True
    lines = Lines("  select: started")

    start = {}

    def report(selector, in_flight: int, seconds: float):
        start.setdefault("spent", selector.spent)          # a resumed run's cells came from the log
        done, budget = selector.spent, selector.config.budget
        rate = (done - start["spent"]) / seconds if seconds > 0 else 0.0
        eta = f", at most {_duration((budget - done) / rate)} left at this rate (the budget; a stop comes sooner)" \
            if rate > 0 and done < budget else ""
        lines(f"  select: {done:,}/{budget:,} cells, {in_flight} in flight, {seconds:.0f} s{eta}")

    return report


def _finished_key(args, plan, inputs, models) -> dict:
    """What a finished selection was: the same command run again finds it finished (`_already_finished`);
    any other plan, candidates, examples, scorer or input file goes on as a resume (which checks it)."""
    return {"plan": plan.to_dict(), "inputs": [list(i) if isinstance(i, tuple) else i for i in inputs],
            "models": list(models), "examples": str(args.examples),
            "scorer": [str(getattr(args, k, None)) for k in ("evaluate", "inspect_task", "lm_eval_task")]}


def _already_finished(args, plan, inputs, models) -> bool:
    """The same command again on a log whose selection finished: say so in one line and show its report,
    without compiling or asking anything (a larger --budget or another --stop goes on instead)."""
    from pulse_jax.live import log_file

    report = plan.report_folder / "report.md"
    if not (Path(plan.log).is_file() and report.is_file()):
        return False
    if log_file.finished_mark(plan.log) != json.loads(json.dumps(_finished_key(args, plan, inputs, models))):
        return False
    print(f"this selection already finished: {plan.log} holds every cell it asked for, and nothing more is "
          f"asked (a larger --budget, or another --stop, goes on from it); its report, {report}:",
          file=sys.stderr)
    print(report.read_text(encoding="utf-8"), end="")
    return True


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _not_a_table(path, lines) -> None:
    """``--models`` is one name per line: a table (a score matrix's CSV, its header first) is refused
    before anything runs, saying what to give instead."""
    fields = [line.count(",") + 1 for line in lines[:50]]
    if str(path).lower().endswith((".csv", ".tsv", ".npz", ".parquet", ".jsonl")) or (
            len(lines) > 1 and min(fields) > 2 and len(set(fields)) == 1):
        raise PulseInputError(f"--models {path}: looks like a table ({max(fields)} comma-separated fields on its "
                              "first line), not a list of candidate names one per line; give a text file of names "
                              "(a score matrix's first column without its header, e.g. `cut -d, -f1 "
                              f"{Path(str(path)).name} | tail -n +2 > models.txt`)")
    longest = max(lines, key=len)
    require(len(longest) <= 500, f"--models {path}: a line of {len(longest):,} characters is no model name; give "
                                 "one candidate name per line")


def _read_models(args) -> list[str]:
    """``--models``: at least two names, none twice, more than a top-k or tie-group certificate names."""
    models = read_lines(args.models, "--models")
    _not_a_table(args.models, models)
    repeated = sorted({m for m in models if models.count(m) > 1})
    require(not repeated, f"--models {args.models}: {len(repeated)} name(s) appear more than once: "
                          f"{', '.join(map(repr, repeated[:5]))}{', ...' if len(repeated) > 5 else ''}")
    require(len(models) >= 2, f"--models {args.models}: {len(models)} model; a selection needs at least 2 candidates")
    return models
