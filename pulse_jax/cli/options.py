"""The options the commands share (argparse groups), and turning them into a run's configuration
and numbers: methods, plug-ins, certificates, ``--param PATH=VALUE``, the defaults by data source."""
from __future__ import annotations

import argparse
import sys

from pulse_jax import choices
from pulse_jax.choices import at_most
from pulse_jax.errors import note, require


PLUGIN_HELP = "a registered name or package.module:attribute (a plug-in of your own)"


def parse_methods(text: str, args=None) -> dict:
    """``--method``: comma-separated estimators (names or ``module:attribute``) as ``{name: Estimator}``.
    Given ``args``, a ``--rank`` that no method would use is refused (it would be ignored)."""
    methods = choices.methods(text, "--method")
    rank_given = args is not None and getattr(args, "rank", None) is not None \
        and "rank" not in getattr(args, "defaulted", ("rank",))
    # a rank beside a history is checked against it, used or not (`check_side_information`); alone, it is
    # a number nothing would read
    require(not rank_given or uses_predictions(methods) or getattr(args, "train", None),
            f"--rank {getattr(args, 'rank', '')}: --method {text} makes no predictions and no --train is given, so no "
            "embeddings are fitted and --rank would be ignored; leave it out (or add a method that uses "
            "predictions, e.g. pulse)")
    return methods


def plugin_option(kind: str, value: str, option: str):
    """``--rule`` / ``--stop``: a registered name or ``module:attribute``, resolved before any computation."""
    return choices.plugin(kind, value, option)


def uses_predictions(methods: dict) -> bool:
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


def by_source(key: str, source: str = "any") -> str:
    """A default's words for a command whose scores come from ``source``: "live" (``select``),
    "built-in" (``demo``), "file" (``simulate``) or "any" (the built-in benchmark or a file)."""
    b, f = RUN_DEFAULTS["built-in"][key], RUN_DEFAULTS["file"][key]
    if source in ("live", "built-in", "file"):
        return f"default: {RUN_DEFAULTS[source][key]:,}"
    return f"default: {b:,} on the built-in benchmark, {f:,} on a file"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, except where there is none or the help states it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or action.default == [] \
                or action.default == argparse.SUPPRESS or "default" in text:
            return text
        return super()._get_help_string(action)


def add_bandit_options(p: argparse.ArgumentParser, *, methods_help: str, source: str = "any") -> None:
    """The options every run shares (simulation and live selection)."""
    p.add_argument("--method", help=methods_help)
    p.add_argument("--batch-size", type=int, default=None, help=f"examples per pull, B ({by_source('batch_size', source)})")
    p.add_argument("--init-batches", type=int, default=1, help="batches per model at initialization (T0)")
    p.add_argument("--exploration", type=float, default=None,
                   help="the index rule's exploration constant a (rule.exploration; default 1)")
    p.add_argument("--refit-every", type=int, default=None,
                   help="bandit steps between refits of the factorization (tau); 0 = only the initial fit "
                        f"({by_source('refit_every', source)})")
    p.add_argument("--rank", type=int, default=None,
                   help=f"rank of the example embeddings fitted on the train split ({by_source('rank', source)})")
    p.add_argument("--delta", type=float, default=None,
                   help="intervals hold with probability 1 - delta (default 0.05; shorthand for --param delta=...)")
    p.add_argument("--bounds", default=None, choices=("all", "certification"),
                   help="all: every model's interval holds at every look at once; certification: only what "
                        "certifying the best needs (a certificate is still wrong at most delta; each upper bound at "
                        "delta/2 on its own, so far fewer cells). Shorthand for --param cs_simultaneous=1 or 0 "
                        f"(default: {'certification' if source == 'live' else 'all'})")
    p.add_argument("--sequence", default="bernstein", choices=("bernstein", "betting"),
                   help="the confidence sequences behind certification: bernstein (predictable-mixture empirical "
                        "Bernstein) or betting (the exact capital on 1,000 grid means: narrower, more memory "
                        "per model)")
    p.add_argument("--rule", default=None,
                   help="sampling rule: ucbe (the paper's index), lucb, top_two, top_two_interval (Top-Two with the "
                        "interval challenger), successive_halving, or "
                        f"{PLUGIN_HELP}; methods without an interval keep ucbe when the rule needs one "
                        f"(default: {'top_two_interval' if source == 'live' else 'ucbe'})")
    p.add_argument("--param", action="append", default=[], metavar="PATH=VALUE",
                   help="set one number of the run by its path, as sweep --grid names them (repeatable): an engine "
                        "number (delta, refit_lr, refit_l2, init_refit_lr, init_refit_l2, cs_horizon, "
                        "cs_simultaneous, refit_prior) or a plug-in's (rule.exploration, rule.leader_fraction, "
                        "estimator.fixed_lambda, stop.epsilon, stop.size, ...), checked against its range. "
                        "--delta, --bounds, --exploration, --epsilon and --tie-group are shorthands for it")
    p.add_argument("--seed", type=int, default=0, help="random seed, an integer in [0, 2**64)")
    p.set_defaults(rule_default="ucbe", delta_default=0.05, bounds_default="all")


def add_run_options(p: argparse.ArgumentParser, *, reps: int, budget_help: str, one_method: bool = False,
                    source: str = "any", costs: str = "--cost") -> None:
    names = "ucbe, pulse, pulse_certify, pulse_hedged, naive"
    add_bandit_options(p, methods_help=(f"the estimator: {names}, or {PLUGIN_HELP} (default: pulse)" if one_method
                                         else f"comma-separated estimators: {names}, or {PLUGIN_HELP} "
                                              "(default: ucbe,pulse,naive)"), source=source)
    p.set_defaults(method="pulse" if one_method else "ucbe,pulse,naive")
    p.add_argument("--reps", type=int, default=reps, help="repetitions" + ("" if one_method else " per method"))
    p.add_argument("--budget", type=int, default=None, help=budget_help)
    p.add_argument("--stop", default=None,
                   help="stopping rule: budget (spend it all), certified (stop once a model is certified best), "
                        f"or {PLUGIN_HELP}; methods without an interval spend the budget (default: budget)")
    p.set_defaults(stop_default="budget")
    add_certificate_options(p, costs)
    p.add_argument("--concurrency", type=int, default=1,
                   help="batches in flight at once, as a live selection with --concurrency asks them: each choice "
                        "is made before the results of the ones before it return (default: 1)")
    p.add_argument("--refit-epochs", type=int, default=None,
                   help="Adam epochs of each periodic refit of the factorization (default: the paper's 10; 3 with "
                        "--param refit_lr=0.3 certifies with the same cells in less time: docs/performance.md)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="repetitions per compiled batch (default: sized from memory)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--force", action="store_true", help="write into --out even if it already holds files")


def add_input_options(p: argparse.ArgumentParser, *, scores_required: bool) -> None:
    p.add_argument("--scores", required=scores_required,
                   help="candidates' scores (.csv or .npz; missing cells allowed)"
                        + ("" if scores_required else " (default: the built-in benchmark)"))
    p.add_argument("--missing", default="keep", choices=("keep", "drop-examples", "drop-models"),
                   help="missing candidate cells: keep (each model's benchmark is what it has scores for), "
                        "or drop the examples / the models that have gaps")
    p.add_argument("--train", default=None, help="historical models' scores on the same examples (side information)")
    p.add_argument("--embeddings", default=None, help=".npy file with example embeddings V (n x rank)")


def add_cost_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cost", default=None, metavar="FILE",
                   help="what a cell costs: a CSV 'model,cost' (per model) or a matrix like the scores' (per cell); "
                        "the rules spend by it, the results count money, --cheapest/--front rank by it")


def add_certificate_options(p: argparse.ArgumentParser, costs: str = "--cost") -> None:
    """``costs``: the options that give this command's costs, as its help names them."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--epsilon", type=float, default=None,
                       help="stop once a model is certified within EPSILON of the best mean: shorthand for "
                            "--stop epsilon_good --param stop.epsilon=EPSILON")
    group.add_argument("--top-k", type=int, default=None, metavar="K",
                       help="stop once the K best models are certified as a set: the stopping rule top_k for K "
                            "models (K is static: it shapes the program); the upper bounds are raised to the level K "
                            "of them need")
    group.add_argument("--cheapest", type=float, default=None, metavar="EPS",
                       help="stop once the cheapest model within EPS of the best is certified (every cheaper model "
                            f"more than EPS below it); ranks the models by their cost per cell ({costs})")
    group.add_argument("--front", type=float, nargs="?", const=0.01, default=None, metavar="EPS",
                       help="stop once the cost-accuracy front is certified: every model on it or beaten by more "
                            f"than EPS (default 0.01) by one at most as expensive ({costs})")
    group.add_argument("--tie-group", type=int, default=None, metavar="SIZE",
                       help="stop once the best model is certified to be one of at most SIZE models (1 is "
                            "exact-best certification): shorthand for --stop tie_group --param stop.size=SIZE")


def _certificates(args) -> dict:
    return {name: getattr(args, name, None) for name in ("epsilon", "top_k", "tie_group", "cheapest", "front")}


def certificate_of(args):
    """``(stop, numbers)`` of ``--epsilon`` / ``--top-k`` / ``--tie-group``; ``(None, {})`` without them."""
    given_stop = args.stop if getattr(args, "stop_given", False) or args.stop not in (None, "budget") else None
    return choices.certificate(_certificates(args), given_stop, choices.flag)


def check_certificate_size(args, n_models: int) -> None:
    """``--top-k K`` and ``--tie-group SIZE`` name fewer models than there are."""
    sizes = {name: value for name, value in _certificates(args).items() if name in ("top_k", "tie_group")}
    choices.check_certificate_size(sizes, n_models, choices.flag)


def rule_option(args):
    """``--rule``'s plug-in; with ``--top-k K`` (K > 1) and no ``--rule``, LUCB for the top K."""
    if not getattr(args, "rule_given", True):
        stop = certificate_of(args)[0]
        rule, notes = choices.certificate_rule(stop, choices.flag,
                                               choices.certificate_words(_certificates(args), choices.flag))
        if rule is not None:
            for text in notes:
                note(text)
            return rule
    return plugin_option("sampling rule", args.rule, "--rule")


def add_stopping_options(sel: argparse.ArgumentParser) -> None:
    sel.add_argument("--stop", default=None,
                     help="stopping rule, checked before every batch: certified (stop once a model is certified "
                          f"best), budget (spend it all), or {PLUGIN_HELP} (default: certified; budget for a "
                          "method without an interval)")
    add_certificate_options(sel, costs="--price, --cost-per-call")
    sel.add_argument("--grace", type=float, default=None,
                     help="on SIGINT/SIGTERM, wait at most this many seconds for the batches in flight (default: "
                          "until they finish; a second signal abandons them)")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the command's help (argparse prints the
    whole usage first, which buries the error)."""

    def error(self, message):
        if "required: --scores" in message:     # where the built-in benchmark runs instead
            message += ("; give your candidates' score matrix (CSV or NPZ), or run `pulse-jax demo` for the built-in "
                        "benchmark (`pulse-jax sweep` also runs on it)")
        self.exit(2, f"pulse-jax: error: {self.prog.removeprefix('pulse-jax').strip() or 'pulse-jax'}: {message} "
                     f"(see {self.prog} --help)\n")


def resolve_defaults(args, source: str) -> None:
    """Fill the options whose default depends on where the scores come from (`RUN_DEFAULTS`)."""
    args.defaulted = set()
    for key, value in RUN_DEFAULTS[source].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
            args.defaulted.add(key)


def check_run_args(args) -> None:
    """Every number of a run, checked before anything is loaded or computed."""
    from pulse_jax.stats.seeds import check_seed

    check_seed(args.seed, "--seed")
    require(args.reps >= 1, f"--reps must be >= 1, got {args.reps}")
    require(args.chunk_size is None or args.chunk_size >= 1, f"--chunk-size must be >= 1, got {args.chunk_size}")
    at_most(args.reps, "--reps")
    at_most(args.chunk_size, "--chunk-size")
    check_numbers(args)


def check_numbers(args) -> None:
    """The options every run shares, in the options' own words (before anything is loaded)."""
    choices.check_counts({name: getattr(args, name, None)
                          for name in ("budget", "batch_size", "init_batches", "refit_every", "refit_epochs", "rank")},
                         choices.flag)
    choices.check_delta(getattr(args, "delta", None), choices.flag)


def check_first_look(budget: int, models: int, args, where: str) -> None:
    """The budget pays for the first look (every model on ``--init-batches`` batches), in option words."""
    choices.check_first_look(budget, models, args.batch_size, args.init_batches, where, choices.flag)


def rule_and_stop(args) -> tuple:
    """``(rule, stop)`` as chosen (`pulse_jax.choices.plugin`: checked, not yet built), a note said where
    a certificate chooses the rule."""
    return rule_option(args), certificate_of(args)[0] or plugin_option("stopping rule", args.stop, "--stop")


def run_budget(args, m: int, n: int, default_budget: int) -> int:
    """The run's budget in cells on an ``m x n`` matrix (``default_budget`` without ``--budget``), with
    every option `bandit_config` reads checked (nothing here imports JAX)."""
    budget = args.budget if args.budget is not None else default_budget
    if budget > m * n:
        print(f"note: --budget {budget:,} is more than the matrix's {m * n:,} cells; using {m * n:,}")
        budget = m * n
    require(args.reps >= 1, f"--reps must be >= 1, got {args.reps}")
    require(args.batch_size <= n, f"--batch-size {args.batch_size} is larger than the number of examples ({n})")
    check_first_look(budget, m, args, "candidates")
    check_certificate_size(args, m)
    concurrency = getattr(args, "concurrency", 1)
    require(1 <= concurrency <= 1024, f"--concurrency must be between 1 and 1024, got {concurrency}")
    choices.check_sequence(args.sequence, choices.flag)
    return budget


def bandit_config(args, m: int, n: int, budget: int):
    """The run's `pulse_jax.BanditConfig` (JAX is imported here) with `run_budget`'s ``budget``."""
    from pulse_jax.engine import BanditConfig

    epochs = getattr(args, "refit_epochs", None)
    return BanditConfig(n_models=m, n_examples=n, budget=budget, batch_size=args.batch_size,
                        init_batches=args.init_batches, refit_every=args.refit_every,
                        **({} if epochs is None else {"refit_epochs": epochs}),
                        cs_grid=cs_grid(args), concurrency=getattr(args, "concurrency", 1))


def cs_grid(args) -> int:
    """``BanditConfig.cs_grid`` of ``--sequence``."""
    return choices.cs_grid(args.sequence, choices.flag)


def for_method(config, estimator, rules: tuple, alone: bool):
    """The `pulse_jax.Plugins` of ``estimator`` with ``rules`` (`rule_and_stop`). In a comparison of several
    methods, a method without an interval keeps the index rule and spends the budget when the chosen rule
    or stopping rule needs an interval (so it runs beside the others), and says so; run alone, such a
    choice is refused (nothing would be what was asked for)."""
    from pulse_jax import engine

    plugins = engine.Plugins(estimator, *rules)
    if estimator.has_interval or not (plugins.rule.needs_interval or plugins.stop.needs_interval):
        return plugins
    if alone:
        engine.check_compatible(config, plugins)
    changed = engine.Plugins(estimator, "ucbe" if plugins.rule.needs_interval else plugins.rule,
                             "budget" if plugins.stop.needs_interval else plugins.stop)
    swaps = [f"{kind} {old.name} -> {new.name}" for kind, old, new in (("rule", plugins.rule, changed.rule),
                                                                      ("stop", plugins.stop, changed.stop))
             if old.name != new.name]
    print(f"pulse-jax: {estimator.name} has no confidence interval, so it runs with {', '.join(swaps)} beside the "
          "other methods", file=sys.stderr)
    return changed


#: The options that are shorthands for ``--param``: their dests.
SHORTHANDS = tuple(name for name, _ in choices.SHORTHANDS)


def fill_defaults(args) -> None:
    """Options whose default depends on the command (``rule_default``, ...) are parsed as None, so an
    option given on the command line is told from its default (``args.given``); then filled."""
    args.given = {name for name in ("rule", "stop", *SHORTHANDS)
                  if getattr(args, name, None) is not None}
    for name in ("rule", "stop", "delta", "bounds"):
        if getattr(args, name, None) is None and hasattr(args, f"{name}_default"):
            setattr(args, name, getattr(args, f"{name}_default"))
    args.rule_given, args.stop_given = "rule" in args.given, "stop" in args.given


def param_values(args) -> dict:
    """``--param PATH=VALUE`` (repeatable) as ``{path: value}`` (`pulse_jax.choices.param_values`)."""
    return choices.param_values(getattr(args, "param", ()), getattr(args, "given", set()), choices.flag)


def check_param_options(args, plugin_sets) -> None:
    """Every ``--param`` path is a number of at least one of the runs' plug-ins and lies in its range."""
    choices.check_param_paths(param_values(args), plugin_sets, choices.flag)


def numbers_of(args, config=None, plugins=None) -> dict:
    """The options' numbers as ``{name: value}`` (the run resolves them against its plug-ins): the
    shorthands, then ``--param`` (those the run's `pulse_jax.Plugins` have, given ``config`` and
    ``plugins``); the certificate's numbers too when its stopping rule is the certificate's."""
    from pulse_jax.engine.params import default_params

    out = choices.base_numbers(args.delta, args.bounds, args.exploration, choices.flag)
    given = param_values(args)
    if config is not None and plugins is not None:
        defaults = default_params(plugins)
        given = {name: value for name, value in given.items() if choices.has_number(defaults, name)}
    out.update(given)
    stop, numbers = certificate_of(args)
    if plugins is not None and stop is not None and choices.same_plugin("stopping rule", stop, plugins.stop):
        out = choices.certificate_levels({**out, **numbers}, stop, config.n_models, choices.flag)
    return out
