"""`Plan`: what a live selection is, as one typed, checked and serializable value.

A plan names the estimator, the sampling and stopping rules (or a certificate), every number, the
side information, the budgets in cells and money, the batch and concurrency, the retries and the
report folder. ``pulse-jax select`` builds one from its flags, Inspect's ``select_best`` from its
keywords, a Python user directly::

    plan = Plan(log="run.db", budget=4000, train="history.csv", epsilon=0.02)
    selector = plan.selector(models, examples)
    report = live.run(evaluate, selector, **plan.run_options())

`Plan.selector` is the one place a plan becomes a running `pulse_jax.live.Selector`. The log header
and ``report.json`` record the plan (`Plan.to_dict`), and `Plan.from_dict` reads it back.

Every value is checked when the plan is made, in the words of whoever made it: ``batch_size`` for
Python, ``--batch-size`` for the command line (``spell``). Making a plan builds nothing, reads no file
and prints nothing: the plug-ins it names are resolved (a ``package.module:attribute`` imported), each
``param`` path and the ``train`` file checked, by `Plan.plugins`, which `Plan.selector` calls first;
what the plan chose on its own is in `Plan.notes` for its caller to say.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from pulse_jax import choices, registry
from pulse_jax.choices import DEFAULT_BOUNDS, DEFAULT_DELTA, DEFAULT_METHOD, DEFAULT_SEQUENCE
from pulse_jax.errors import PulseInputError, note, require
from pulse_jax.live import money, side_information

#: The embeddings' rank when none is given (capped by the history's size).
DEFAULT_RANK = 16


def _tuple_of_strings(value, name: str, spell) -> tuple:
    if value is None:
        return ()
    require(isinstance(value, (str, Path, list, tuple)), f"{spell(name)} must be text or a list of texts, got {value!r}")
    items = (value,) if isinstance(value, (str, Path)) else tuple(value)
    require(all(isinstance(v, (str, Path)) for v in items), f"{spell(name)} must be text or a list of texts, got {value!r}")
    return tuple(str(v) for v in items)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A live selection, described (see the module docstring). Fields are ``pulse-jax select``'s
    options by their long names; None means the default stated beside each."""

    log: str                                  # the SQLite log; an existing one is resumed
    budget: int | None = None                 # cells, first look included (None: every cell)
    method: str | None = None                 # the estimator (None: pulse_hedged with history, ucbe without)
    rule: str | None = None                   # sampling rule (None: top_two_interval; ucbe without an interval)
    stop: str | None = None                   # stopping rule (None: certified; budget without an interval)
    epsilon: float | None = None              # certificate: within epsilon of the best
    top_k: int | None = None                  # certificate: the k best as a set
    tie_group: int | None = None              # certificate: the best among at most this many
    cheapest: float | None = None             # certificate: the cheapest model within this of the best
    front: float | None = None                # certificate: the cost-accuracy front, within this
    delta: float | None = None                # a wrong certificate has chance at most delta (None: 0.05)
    bounds: str | None = None                 # "all" or "certification" (None: certification)
    sequence: str = DEFAULT_SEQUENCE          # "betting" or "bernstein"
    gap_horizon: float | None = None          # bets tuned to the running gap (None: 0.5 for a best-model claim; 0: off)
    exploration: float | None = None          # the index rule's exploration (None: the rule's default)
    param: tuple = ()                         # ((path, value), ...): any number by its path
    batch_size: int = 8
    init_batches: int = 1
    refit_every: int = 1000
    rank: int | None = None                   # embeddings' rank (None: 16, capped by the history)
    seed: int = 0
    train: str | None = None                  # historical scores (CSV/NPZ/Parquet) the embeddings are fitted on
    concurrency: int | None = None            # batches in flight (None: 16; 1 for a scorer that runs one at a time)
    retries: int = 3
    retry_wait: float = 1.0
    retry_max_wait: float = 60.0
    call_timeout: float | None = None
    grace: float | None = None
    price: tuple = ()                         # "MODEL=IN/OUT" dollars per million tokens ("*": every other)
    cost_per_call: float | None = None
    budget_usd: float | None = None
    usage: tuple = ()                         # Inspect logs whose token counts estimate the cost
    report: str | None = None                 # report folder (None: <log name>_report beside the log)
    force: bool = False                       # replace another run's report there
    spell: Callable[[str], str] = dataclasses.field(default=choices.keyword, compare=False, repr=False)

    def __post_init__(self):
        spell = self.spell
        set_ = lambda name, value: object.__setattr__(self, name, value)   # noqa: E731 -- frozen: normalize once
        require(isinstance(self.log, (str, Path)) and str(self.log), f"{spell('log')} must be a file name, got {self.log!r}")
        set_("log", str(self.log))
        require(Path(self.log).name, f"{spell('log')} {self.log}: is a directory; give a file name")
        for name in ("report", "train"):
            if getattr(self, name) is not None:
                require(isinstance(getattr(self, name), (str, Path)),
                        f"{spell(name)} must be a file name, got {getattr(self, name)!r}")
                set_(name, str(getattr(self, name)))
        set_("price", _tuple_of_strings(self.price, "price", spell))
        money.check_price_syntax(self.price, spell("price"))
        set_("usage", _tuple_of_strings(self.usage, "usage", spell))
        for name in ("sequence",) + tuple(n for n in ("method", "rule", "stop", "bounds") if getattr(self, n) is not None):
            require(isinstance(getattr(self, name), str), f"{spell(name)} must be a name (text), got "
                                                          f"{getattr(self, name)!r}")
        from pulse_jax.stats.seeds import check_seed

        check_seed(self.seed, spell("seed"))
        choices.check_counts({name: getattr(self, name) for name in ("budget", "batch_size", "init_batches",
                                                                     "refit_every", "rank")}, spell)
        choices.check_delta(self.delta, spell)
        require(self.exploration is None or (isinstance(self.exploration, (int, float))
                                             and not isinstance(self.exploration, bool)
                                             and math.isfinite(self.exploration) and self.exploration >= 0),
                f"{spell('exploration')} must be a number >= 0, got {self.exploration!r}")
        self._check_live_numbers()
        params = self.param.items() if isinstance(self.param, Mapping) else self.param
        set_("param", tuple(choices.param_values(params, self._shorthands_given(), spell).items()))
        self.numbers_of_shorthands()       # bounds, delta, exploration: checked
        choices.check_sequence(self.sequence, spell)
        choices.check_gap_horizon(self.gap_horizon, spell)
        self.certificate()                 # one certificate, not beside a stopping rule
        require(self.cheapest is None and self.front is None or self.price or self.cost_per_call is not None,
                f"{spell('cheapest' if self.cheapest is not None else 'front')} ranks the models by price: give "
                f"{spell('price')} MODEL=DOLLARS (per call) or MODEL=IN/OUT (per million tokens) for each model, "
                f"or {spell('cost_per_call')}")

    # ------------------------------------------------------------------ checks

    def _check_live_numbers(self) -> None:
        spell = self.spell

        def seconds(name, value, strict=False):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
                value > 0 if strict else value >= 0)
            require(ok, f"{spell(name)} must be a number of seconds {'>' if strict else '>='} 0, got {value!r}")

        choices.check_counts({"concurrency": self.concurrency}, spell)
        require(isinstance(self.retries, int) and not isinstance(self.retries, bool) and self.retries >= 0,
                f"{spell('retries')} must be >= 0, got {self.retries!r}")
        choices.at_most(self.concurrency, spell("concurrency"), 1024)
        choices.at_most(self.retries, spell("retries"), 1000)
        for name in ("retry_wait", "retry_max_wait"):
            seconds(name, getattr(self, name))
        if self.grace is not None:
            seconds("grace", self.grace)
        if self.call_timeout is not None:
            seconds("call_timeout", self.call_timeout, strict=True)
        for name in ("cost_per_call", "budget_usd"):
            value, least = getattr(self, name), (">= 0" if name == "cost_per_call" else "> 0")
            require(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and math.isfinite(value) and (value >= 0 if least == ">= 0" else value > 0)),
                    f"{spell(name)} must be a number of dollars {least}, got {value!r}")
        require(self.budget_usd is None or self.price or self.cost_per_call is not None,
                f"{spell('budget_usd')} needs prices: {spell('price')} MODEL=DOLLARS (per call) or MODEL=IN/OUT "
                "(dollars per million tokens) "
                f"or {spell('cost_per_call')}")
        require(isinstance(self.force, bool), f"{spell('force')} must be True or False, got {self.force!r}")

    def _shorthands_given(self) -> set:
        return {name for name, _ in choices.SHORTHANDS if getattr(self, name, None) is not None}

    def certificate(self):
        """``(stop, numbers)`` of the certificate (``epsilon``, ``top_k``, ``tie_group``); ``(None, {})``."""
        given = {"epsilon": self.epsilon, "top_k": self.top_k, "tie_group": self.tie_group,
                 "cheapest": self.cheapest, "front": self.front}
        return choices.certificate(given, self.stop, self.spell)

    def numbers_of_shorthands(self) -> dict:
        return choices.base_numbers(DEFAULT_DELTA if self.delta is None else self.delta,
                                    self.bounds or DEFAULT_BOUNDS, self.exploration, self.spell)

    def plugins(self):
        """``(estimator, rule, stop)``: the plug-ins the plan names (``stop`` None: the certificate's, else
        certified with an interval, budget without), with each ``param`` path and the ``train`` file
        checked against them. A built-in comes as its `pulse_jax.registry.BuiltIn` (what it declares,
        read without importing JAX; `pulse_jax.registry.resolve` builds it), a plug-in of your own as
        itself.

        Resolved on the first call, once, for the plan's whole life: making a plan only checks its
        values, so a plug-in named ``package.module:attribute`` is imported here, not when the plan is
        made, and a plan read back from a log or ``report.json`` (`from_dict`) imports nothing.
        `selector` calls it before anything else; ``pulse-jax select`` before it starts the scorer.
        """
        resolved = self.__dict__.get("_plugins")
        if resolved is None:
            resolved = self._resolve_plugins()
            spell = self.spell
            registry.check_interval_needs(*resolved)
            choices.check_param_paths(dict(self.param), [resolved], spell)   # each --param path names a number
            require(self.train is None or not resolved[0].uses_predictions or Path(self.train).is_file(),
                    f"{spell('train')} {self.train}: no such file"
                    + (" (it is a directory)" if self.train is not None and Path(self.train).is_dir() else ""))
            object.__setattr__(self, "_plugins", resolved)
        return resolved

    def _resolve_plugins(self):
        spell = self.spell
        estimators = choices.methods(self.method_name(), spell("method"))
        require(len(estimators) == 1, f"{spell('method')}: a selection runs one method, got {', '.join(estimators)}")
        (estimator,) = estimators.values()
        stop = self.certificate()[0] or (choices.plugin("stopping rule", self.stop, spell("stop"))
                                         if self.stop is not None else choices.default_stop(estimator))
        if self.rule is not None:
            return estimator, choices.plugin("sampling rule", self.rule, spell("rule")), stop
        given = {"top_k": self.top_k, "cheapest": self.cheapest, "front": self.front}
        rule, notes = choices.default_rule(estimator, stop, spell, choices.certificate_words(given, spell))
        # said by whoever runs the plan (`notes`): making a plan prints nothing
        object.__setattr__(self, "_notes", tuple(f"note: {text}" for text in notes))
        return estimator, rule, stop

    @property
    def notes(self) -> tuple:
        """What the plan chose on its own that its maker should be told (one line each; its plug-ins are
        resolved first, `plugins`); a plan prints nothing, so the command line, ``select_best`` and
        `selector` say these."""
        self.plugins()
        return self.__dict__.get("_notes", ())

    def has_history(self) -> bool:
        """Whether there is side information: ``train``, or the embeddings a resumed log keeps beside it."""
        log = Path(self.log)
        return bool(self.train) or side_information.saved_path(log).exists()

    def method_name(self) -> str:
        """The estimator's name: the one given, else PULSE hedged with history and UCB-E without (a
        selection without historical scores runs, on the observations alone)."""
        return self.method if self.method is not None else choices.default_method(self.has_history())

    def say_method(self) -> None:
        """A note when the plan chose UCB-E for want of history, saying how to give it for PULSE."""
        if self.method is None and not self.has_history():
            note(f"no historical scores, so the selection runs UCB-E (observations alone); give "
                 f"{self.spell('train')} (earlier models' scores on the same examples) for PULSE, which "
                 "certifies with fewer cells")

    # ------------------------------------------------------------------ into a selector

    def numbers(self, plugins, n_models: int) -> dict:
        """The run's numbers for ``plugins`` (each ``param`` path checked against them), with the
        certificate's, and the upper bounds' level raised to what a top-k claim needs."""
        values = dict(self.param)
        choices.check_param_paths(values, [plugins], self.spell)
        certificate, extra = self.certificate()
        numbers = {**self.numbers_of_shorthands(), **values}
        given = {str(k).rsplit(".", 1)[-1] for k in values}
        if certificate is not None:
            numbers = choices.certificate_levels({**numbers, **extra}, certificate, n_models, self.spell)
        return choices.claim_split(numbers, plugins[2], given)

    def check_models(self, n_models: int, budget: int, where: str) -> None:
        """The certificate names fewer models than there are; the budget pays for the first look."""
        choices.check_certificate_size({"top_k": self.top_k, "tie_group": self.tie_group}, n_models, self.spell)
        choices.check_first_look(budget, n_models, self.batch_size, self.init_batches, where, self.spell)

    def side_information(self, estimator):
        """``(train, rank)``: the historical scores a method with predictions fits its embeddings on (None:
        the log keeps them, or the method needs none) and the rank; the log's folder checked first."""
        spell, log = self.spell, Path(self.log)
        require(not log.is_dir(), f"{spell('log')} {self.log}: is a directory; give a file name")
        require(log.parent.is_dir(), f"{spell('log')} {self.log}: its folder {log.parent} does not exist; create "
                                     "it first (a misspelt folder would otherwise start a new log)")
        saved = side_information.saved_path(log)   # a resumed run's side information
        require(self.train or saved.exists() or not estimator.uses_predictions,
                f"{spell('method')} {estimator.name} needs side information: pass {spell('train')}"
                f"{' FILE' if spell('train').startswith('-') else '='} (historical models' scores on the same "
                f"examples), or use {spell('method')} ucbe")
        for name in ("train", "rank"):     # given for a method without predictions: it would be ignored
            require(getattr(self, name) is None or estimator.uses_predictions,
                    f"{spell(name)} {getattr(self, name)}: {spell('method')} {estimator.name} uses no predictions, "
                    f"so {spell(name)} would be ignored; leave it out, or choose a method with predictions "
                    f"({DEFAULT_METHOD})")
        rank = DEFAULT_RANK if self.rank is None else self.rank
        if not (self.train and estimator.uses_predictions):
            return None, rank
        from pulse_jax.fileio import data

        loaded = self.__dict__.get("_history")     # read and checked once per plan (select checks it early)
        first = loaded is None or loaded[0] != self.train
        if first:
            train = data.load(self.train)
            data.check_history(train)
            object.__setattr__(self, "_history", (self.train, train))     # not a field: equality ignores it
        train = self.__dict__["_history"][1]
        limit = min(train.scores.shape)
        if self.rank is None and rank > limit:
            if first:
                note(f"{spell('rank')} {rank} (the default) needs at least {rank} historical models; "
                     f"{spell('train')} has {train.scores.shape[0]} models x {train.scores.shape[1]} examples, so "
                     f"rank {limit} is used")
            rank = limit
        return train, rank

    def selector(self, models: Sequence[str], examples, *, order=None, where: str = "candidates", cost=None):
        """The running `pulse_jax.live.Selector` of this plan on ``models`` and ``examples`` (a count or
        ids); ``order``: per-model example orders (Inspect's); ``cost``: each model's expected cost per cell (the `meter`'s
        ``expected``), which the rules spend by and the certificates about cost rank by."""
        from pulse_jax.choices import CONCURRENCY
        from pulse_jax.live import report_files
        from pulse_jax.live.selector import Selector

        n_examples = examples if isinstance(examples, int) else len(examples)
        cells = len(models) * n_examples
        budget = cells if self.budget is None else self.budget
        if budget > cells:       # more than every cell: said in the plan's words, then every cell
            note(f"{self.spell('budget')} {budget:,} is more than the {cells:,} cells of {len(models)} models x "
                 f"{n_examples:,} examples; using {cells:,}")
            budget = cells
        plugins = self.plugins()
        self.check_models(len(models), budget, where)
        for text in self.notes:
            note(text.removeprefix("note: "))
        self.say_method()
        numbers = self.numbers(plugins, len(models))
        train, rank = self.side_information(plugins[0])
        report_files.check_report_folder(self)
        return Selector(models, examples, budget, method=plugins[0], batch_size=self.batch_size,
                        init_batches=self.init_batches, refit_every=self.refit_every, seed=self.seed, train=train,
                        rank=rank, log=self.log, rule=plugins[1], params=numbers,
                        cs_grid=choices.cs_grid(self.sequence, self.spell), stop=plugins[2], order=order,
                        concurrency=self.concurrency or CONCURRENCY, plan=self.to_dict(), cost=self.selector_cost(cost),
                        gap_horizon=self.gap_horizon)

    def selector_cost(self, cost):
        """``cost`` when every model has a positive one; None otherwise (refused when a certificate about
        cost needs it)."""
        if cost is not None and np.all(np.asarray(cost, float) > 0):
            return np.asarray(cost, float)
        require(self.cheapest is None and self.front is None,
                f"{self.spell('cheapest' if self.cheapest is not None else 'front')} ranks the models by price, "
                "and not every model has a positive expected cost per cell: give each model a price")
        return None

    def run_options(self) -> dict:
        """`pulse_jax.live.run`'s keywords of this plan (retries, waits, timeout, grace)."""
        return {"retries": self.retries, "retry_wait": self.retry_wait, "retry_max_wait": self.retry_max_wait,
                "grace": self.grace, "call_timeout": self.call_timeout}

    @property
    def has_money_side(self) -> bool:
        """Whether the plan has a money side (``price``, ``cost_per_call`` or ``budget_usd``)."""
        return bool(self.price or self.cost_per_call is not None or self.budget_usd is not None)

    def meter(self, models, tokens=None, history=None):
        """The money side (`pulse_jax.live.money.Meter`; None without ``price``, ``cost_per_call`` or
        ``budget_usd``); ``tokens``: the scorer's token counter (Inspect's); ``history``: the token
        counts of the ``usage`` logs (`pulse_jax.harnesses.inspect_logs.usage_history` reads them)."""
        if not self.has_money_side:
            return None
        from pulse_jax.live import money

        require(history is not None or not self.usage, f"{self.spell('usage')}: read the logs first "
                                                       "(pulse_jax.harnesses.inspect_logs.usage_history)")
        prices = money.parse_prices(list(self.price), models, self.cost_per_call)
        require(tokens is not None or not any(p.per_token for p in prices.values()),
                f"{self.spell('price')} in tokens needs a scorer that reports tokens (Inspect); price a scorer of "
                f"your own per call with {self.spell('cost_per_call')}")
        expected = money.expected_cost_per_cell(models, prices, history)
        return money.Meter(models, prices, expected, budget_usd=self.budget_usd, tokens=tokens)

    # ------------------------------------------------------------------ the report

    @property
    def report_folder(self) -> Path:
        log = Path(self.log)
        return Path(self.report) if self.report else log.with_name(log.stem + "_report")

    # ------------------------------------------------------------------ serialization

    def to_dict(self) -> dict:
        """The plan as JSON-ready values (``param`` as ``[[path, value], ...]``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "spell"}
        return {k: [list(p) for p in v] if k == "param" else list(v) if isinstance(v, tuple) else v
                for k, v in out.items()}

    @classmethod
    def from_dict(cls, values: Mapping, spell=choices.keyword) -> "Plan":
        """A plan from `to_dict`'s values (a log header's, ``report.json``'s) or from keywords; an unknown
        name is refused in one line listing the known ones."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "spell"]
        unknown = [k for k in values if k not in names]
        if unknown:
            raise PulseInputError(f"{spell(unknown[0])} is not a choice of a selection plan; its choices are "
                                  f"{', '.join(spell(n) for n in names)}")
        values = dict(values)
        if "param" in values and not isinstance(values["param"], Mapping):
            values["param"] = tuple(tuple(p) if isinstance(p, list) else p for p in values["param"])
        return cls(**values, spell=spell)
