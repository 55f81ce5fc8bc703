"""The kernel: one bandit step, ``stop_status -> ask (choose, refit when due, draw) -> tell``, over an explicit
`pulse_jax.engine.state.BanditState`.

`build_kernel` binds the static half of a run (`BanditConfig` and the `Plugins`, hashable) and
returns a `Kernel` of pure functions over the dynamic half, each taking its arguments in one
order, ``(episode, state, params, t, ...)``; ``params`` is the run's `pulse_jax.RunParams`,
resolved once where the run starts (`pulse_jax.engine.make_run`, the live selector). The drivers
(`pulse_jax.engine.drivers`) and live selection call the same kernel.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from pulse_jax.engine.bookkeeping import (Certificate, Snapshots, bet_horizon, current_estimates, half_widths,
                                          interval_bounds, record_certificate)
from pulse_jax.engine.config import BanditConfig, Plugins, as_plugins, log_chunk_slots, refit_due
from pulse_jax.engine.params import RunParams
from pulse_jax.engine.refit import adam_refit, periodic_numbers, refit, refit_numbers, refit_part, with_refit_part
from pulse_jax.engine.state import (BanditState, Episode, PullLog, StepInfo, Told, add_to_log, cells_cost, draw_keys,
                                    initial_draws)
from pulse_jax.estimators.base import ModelSums, Pull, draw_design
from pulse_jax.rules.base import RuleInputs
from pulse_jax.stats import confidence, factorization
from pulse_jax.stats import without_replacement as sampling
from pulse_jax.stats.ties import BEST, random_argmax, tie_uniform
from pulse_jax.stopping.base import StopInputs, no_claim


class Static(NamedTuple):
    """The static half of every kernel function: the run's `BanditConfig` and `Plugins` (hashable)."""

    config: BanditConfig
    plugins: Plugins


class Choice(NamedTuple):
    """A step's choice: the model and its batch size ``B'`` (0: the step spends nothing); ``hold``: the
    step spends nothing because the batches in flight may settle the stop (`InFlight`)."""

    model: jax.Array
    size: jax.Array
    hold: jax.Array | bool = False


class Batch(NamedTuple):
    """A drawn batch with its scores: ``examples`` (B,), ``valid`` (B,) (the first ``size``), ``scores`` (B,)."""

    model: jax.Array
    size: jax.Array
    examples: jax.Array
    valid: jax.Array
    scores: jax.Array


class InFlight(NamedTuple):
    """Batches asked but not yet observed (a live selection's pending requests, a simulated run's queue at
    ``concurrency > 1``), per model: their ``cells`` (m,), their ``batches`` (m,) and ``rows``, the packed
    mask of the examples observed *or* in flight (m, W).

    A choice counts them as allocated: the rule sees ``n_obs + cells`` (the widths its index or cost
    derives from the counts shrink for what is on its way, the estimates do not move), a model whose
    unseen examples are all in flight cannot be chosen, and a batch is drawn uniformly from the
    examples neither observed nor in flight, with the draw key of the count including them. Nothing
    an estimate or a confidence sequence uses reads them (docs/live.md, "Asking while batches are in
    flight")."""

    cells: jax.Array
    batches: jax.Array
    rows: jax.Array


class Status(NamedTuple):
    """What the stopping rule decides at a step (`Kernel.stop_status`): ``done`` (the run stops, or
    already has), ``claim`` ((m,) bool: the models its certificate names now), ``focus`` ((m,) bool:
    where its claim waits; the sampling rule is given it), ``hold`` (with batches in flight: an ask
    holds back, since they may settle the stop) and ``looks`` (the `StopInputs` it decided on, which
    the sampling rule sees too)."""

    done: jax.Array
    claim: jax.Array
    focus: jax.Array
    hold: jax.Array
    looks: StopInputs


class Asked(NamedTuple):
    """A step's ask (`Kernel.ask`): the model, the batch size (0: the step spends nothing), the batch's
    examples (B,) and which are ``valid`` (the first ``size``), and ``hold`` (the ask held back)."""

    model: jax.Array
    size: jax.Array
    examples: jax.Array
    valid: jax.Array
    hold: jax.Array


class Start(NamedTuple):
    """Where a repetition's rows of U start (``init_U``, ``(m, r)``; None: zeros) and the Gaussian
    every refit pulls them towards (``row_prior``, a `pulse_jax.stats.factorization.RowPrior`;
    None: the candidates' mean row), with weight ``params.refit_prior``; and what each cell costs
    (``cost``, ``(m, n)``: `Kernel.tell` reports what a batch's cells cost, and the rules see each
    model's mean cost per cell; None: every cell costs 1, and the money counts cells)."""

    init_U: jax.Array | None = None
    row_prior: factorization.RowPrior | None = None
    cost: jax.Array | None = None   # (m, n) what each cell costs, any unit (None: every cell costs 1)

#: The kernel's function types (see `Kernel`).
InitFn = Callable[..., tuple[Episode, BanditState]]
StatusFn = Callable[..., Status]
AskFn = Callable[..., tuple[BanditState, Asked]]
TellFn = Callable[..., tuple[BanditState, Told]]
StepFn = Callable[..., tuple[BanditState, StepInfo]]
BoundsFn = Callable[[BanditState, RunParams], tuple[jax.Array, jax.Array, jax.Array]]
RecordFn = Callable[..., StepInfo]


def _where_tree(pred, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)


def _log_inv_alpha(s: Static, params: RunParams):
    """The ``(lower, upper)`` levels of the confidence sequences (`confidence.cs_levels`)."""
    return confidence.cs_levels(params.delta, s.config.n_models, s.plugins.estimator.n_sequences,
                                params.cs_simultaneous, params.cs_upper_share)


def _empty_log(s: Static) -> PullLog:
    """One log slot per step, rounded up to whole refit chunks (one empty slot when there are no steps)."""
    config = s.config
    chunk = log_chunk_slots(config)
    slots = -(-max(config.n_steps, 1) // chunk) * chunk if s.plugins.estimator.uses_predictions else 0
    B = config.batch_size
    return PullLog(jnp.zeros(slots, jnp.int32), jnp.zeros((slots, B), jnp.int32), jnp.zeros((slots, B), jnp.float32),
                   jnp.zeros(slots, jnp.int32))


def _first_state(s: Static, first, observed, population, U, params: RunParams) -> BanditState:
    """The state after the initial batches ``first`` (``(m, T0 B)`` scores), before any fit (``U`` the rows
    the first fit starts from)."""
    config, plugins = s
    m, C = config.n_models, plugins.estimator.n_sequences
    zeros = jnp.zeros(m, jnp.float32)
    sums = ModelSums(jnp.full(m, config.init_cells_per_model, jnp.int32), jnp.ones(m, jnp.int32), first.sum(1),
                    (first * first).sum(1), zeros, zeros, population)
    # The initial batches enter the confidence sequences as raw scores: no prediction exists yet
    # (for PULSE this is lambda = 0), and each batch is in its sampler's uniform draw order.
    cs = confidence.cs_init(m, C, config.cs_grid)
    if plugins.estimator.has_interval:
        rows = jnp.broadcast_to(first[:, None], (m, C) + first.shape[1:])
        draws = confidence.Draws(jnp.zeros(m, jnp.int32), zeros, population.astype(jnp.float32), first,
                                 jnp.ones(first.shape, bool))
        raw = confidence.Observations(rows, jnp.zeros_like(rows), jnp.ones_like(rows))
        cs = confidence.cs_update_all(cs, draws, raw, _log_inv_alpha(s, params), params.cs_horizon)
    return BanditState(sums, None, U, observed, first, _empty_log(s),
                       jnp.int32(config.init_cells), jnp.int32(0), cs, Certificate(jnp.int32(-1), jnp.int32(-1)),
                       plugins.rule.init(config), jnp.bool_(False))


def _init(s: Static, key, scores, V, params: RunParams, start: Start) -> tuple[Episode, BanditState]:
    """Stage 1: the repetition's draws, the initial batches (``scores`` needs only their cells; NaN
    marks a cell a model has no score for) and the first fit of U, which starts from
    ``start.init_U`` and, like every refit, is pulled towards ``start.row_prior``."""
    config, plugins = s
    estimator = plugins.estimator
    model_order, examples_key, tie_key = draw_keys(key, config.n_models)
    missing = jnp.isnan(scores)
    scores = jnp.where(missing, 0.0, scores)
    population = jnp.sum(~missing, axis=1).astype(jnp.int32)
    first_examples, observed = initial_draws(examples_key, config, missing, population)
    cost = None if start.cost is None else jnp.asarray(start.cost, jnp.float32)
    episode = Episode(scores, missing, V, model_order, first_examples, examples_key, tie_key, start.row_prior, cost)
    first = jnp.take_along_axis(scores, first_examples, axis=1)
    U = jnp.zeros((config.n_models, V.shape[1]), jnp.float32) if start.init_U is None \
        else jnp.asarray(start.init_U, jnp.float32)
    state = _first_state(s, first, observed, population, U, params)
    state = state._replace(cost=_model_cost(cost, missing, population))
    if estimator.uses_predictions:
        numbers = refit_numbers(params.init_refit_lr, params.init_refit_l2, params.refit_prior, episode.row_prior)
        state = refit(episode, state, config.init_refit_epochs, numbers, with_log=False)   # the log is empty
        if config.carry_refit_state:   # the periodic refits' one Adam run starts at the fitted U
            periodic = adam_refit(config.refit_epochs, *periodic_numbers(params, episode))
            state = state._replace(refit_state=periodic.optimizer.init(state.U))
    state = state._replace(estimator=estimator.init(state.sums, params.estimator))
    state = state._replace(best=_recommend(s, episode, state, params, 0))
    return episode, record_certificate(config, estimator, state, params)


def _model_cost(cost, missing, population):
    """``(m,)``: each model's mean cost per cell over its benchmark (ones without costs)."""
    if cost is None:
        return jnp.ones(missing.shape[0], jnp.float32)
    return jnp.sum(jnp.where(missing, 0.0, cost), axis=1) / jnp.maximum(population, 1).astype(jnp.float32)


def _recommend(s: Static, episode: Episode, state: BanditState, params: RunParams, t):
    """The run's best guess: ``argmax mu_hat`` over the models the rule deems eligible (random ties)."""
    config, plugins = s
    mu = current_estimates(plugins.estimator, state, config.n_examples, params)
    if plugins.rule.eligible is not None:
        mu = jnp.where(plugins.rule.eligible(state.rule), mu, -jnp.inf)
    return random_argmax(tie_uniform(episode.key, t, BEST), mu, episode.model_order)


def sequence_bounds(kernel: "Kernel", state: BanditState, params: RunParams):
    """Every model's confidence sequences each on its own now, ``(m, C)`` each, at the run's levels:
    what a run's `pulse_jax.engine.run_trace.Trace` starts from after the initial batches."""
    return confidence.sequence_bounds(state.cs, _log_inv_alpha(Static(kernel.config, kernel.plugins), params))


def room(config: BanditConfig, state: BanditState, i, reserved=0, in_flight: InFlight | None = None):
    """``B' = min(B, |U_i|, budget left - reserved)`` for model ``i`` (never below 0); ``U_i`` leaves out
    the examples in flight."""
    sums = state.sums
    allocated = sums.n_obs[i] if in_flight is None else sums.n_obs[i] + in_flight.cells[i]
    size = jnp.minimum(jnp.minimum(config.batch_size, sums.population[i] - allocated),
                       config.budget - state.spent - reserved)
    return jnp.maximum(size, 0)


def _stop_inputs(s: Static, state: BanditState, params: RunParams, t) -> StopInputs:
    """What the rules see at step ``t``: estimates, and the bounds when a rule needs them (else NaN)."""
    config, (estimator, rule, stop) = s
    mu = current_estimates(estimator, state, config.n_examples, params)
    low, high = interval_bounds(estimator, state, config, params) if rule.needs_interval or stop.needs_interval \
        else (jnp.full(config.n_models, jnp.nan, jnp.float32),) * 2
    return StopInputs(t, state.spent, config.budget, mu, low, high, state.certified.spent >= 0, state.certified.model,
                      state.cost)


#: ``logged`` codes of `Kernel.stop_status` while a live selection replays its log.
REPLAYED_ASK, REPLAYED_HOLD, REPLAYED_UNTOLD = 0, 1, 2


def _stop_status(s: Static, state: BanditState, params: RunParams, t, in_flight: InFlight | None = None,
                 logged=None) -> Status:
    """Everything the stopping rule decides at step ``t``, in one place (`Status`): whether the run
    stops (or already has), the models its certificate names now, where its claim waits (``focus``,
    which the sampling rule is given), and, with batches ``in_flight``, whether an ask holds back
    (`_held`). Simulation, the concurrent event loop and live selection all stop through it.

    ``logged`` (a live selection replaying its log; -1 or None: not a replay): the logged run went on
    at this step whatever the rule says now (it may have stopped by another rule, `resumed`), so the
    run is not done; it held back where the log holds a hold (`REPLAYED_HOLD`), asked where the log
    holds a batch (`REPLAYED_ASK`), and holds as the rule says for an ask the log never told
    (`REPLAYED_UNTOLD`: it was in flight when the logged run ended)."""
    config, (_, _, stop) = s
    looks = _stop_inputs(s, state, params, t)
    focus = jnp.ones(config.n_models, bool) if stop.focus is None else stop.focus(looks, params.stop)
    hold = jnp.bool_(False) if in_flight is None else _held(s, state, params, looks, in_flight, t)
    done = state.stopped | stop.done(looks, params.stop)
    if logged is not None:
        told = (logged == REPLAYED_ASK) | (logged == REPLAYED_HOLD)
        done, hold = done & (logged < 0), jnp.where(told, logged == REPLAYED_HOLD, hold)
    return Status(done, stop.claim(looks, params.stop), focus, hold, looks)


def record_stop(state: BanditState, fires) -> BanditState:
    """``state`` with its stop recorded where ``fires``: the one place a run's stop is set (`resumed`
    clears it); a stopped run pulls nothing more."""
    return state._replace(stopped=state.stopped | fires)


def _apply_status(state: BanditState, status: Status, t) -> BanditState:
    """The stop recorded in the state: it fires at step ``t >= 1`` (the claim made then is the step's
    `StepInfo`'s, `_record`)."""
    return record_stop(state, status.done & (t >= 1))


def resumed(state: BanditState) -> BanditState:
    """``state`` going on after its stop: a live selection given another stopping rule
    (`pulse_jax.live.Selector.use_stop`) asks again until that rule fires."""
    return state._replace(stopped=jnp.zeros_like(state.stopped))


def _choose(s: Static, episode: Episode, state: BanditState, params: RunParams, t, status: Status, *,
            blocked=None, in_flight: InFlight | None = None) -> tuple[BanditState, Choice]:
    """Step 1: the model the sampling rule chooses and its batch size ``B'``, given the stopping rule's
    ``status`` at step ``t`` (its focus is the rule's; a run that is done or holds back spends nothing).

    The rule sees the models that are not exhausted (nor ``blocked``: a live
    selector blocks models with a batch in flight) and, if it asks, the
    simultaneous bounds. ``size = 0`` means nothing to do: always at ``t = 0``,
    when the rule chooses no model, and once the run is done. The rule's state is
    kept from step 1 on (at ``t = 0`` nothing happens).

    ``in_flight`` (`InFlight`): batches asked before this one and not yet observed; the rule sees
    their cells and batches as allocated (``n_obs``, ``n_pulls``), and a model with no unseen example
    left outside them is not ``active``; the budget left leaves their cells out.
    """
    config, (estimator, rule, stop) = s
    m, sums, looks = config.n_models, state.sums, status.looks
    exhausted = sums.n_obs >= sums.population
    n_alloc, pulls, reserved = sums.n_obs, sums.n_pulls, 0
    if in_flight is not None:
        n_alloc, pulls, reserved = n_alloc + in_flight.cells, pulls + in_flight.batches, jnp.sum(in_flight.cells)
    active = n_alloc < sums.population
    active = active if blocked is None else active & ~blocked
    low, high = looks.low, looks.high
    if in_flight is not None:
        low, high = _hallucinated(looks.estimates, low, high, sums, n_alloc)
    inputs = RuleInputs(t, looks.estimates, low, high, n_alloc, pulls, active, exhausted,
                        episode.model_order, episode.key, state.cost, status.focus)
    i, rule_state = rule.choose(state.rule, inputs, params.rule)
    valid = (i >= 0) & (i < m)
    i = jnp.clip(i, 0, m - 1).astype(jnp.int32)
    done = status.done
    go = valid & active[i] & (t >= 1) & ~done & ~status.hold
    moves = (t >= 1) & ~done           # a stopped run changes nothing, its rule's state included
    if rule.eligible is not None:      # the recommendation follows the rule's eligible set when it changes
        changed = moves & jnp.any(rule.eligible(rule_state) != rule.eligible(state.rule))
        best = _recommend(s, episode, state._replace(rule=rule_state), params, t)
        state = state._replace(best=jnp.where(changed, best, state.best))
    state = state._replace(rule=_where_tree(moves, rule_state, state.rule))
    return state, Choice(i, jnp.where(go, room(config, state, i, reserved, in_flight), 0),
                         (t >= 1) & ~done & status.hold)


def _hallucinated(estimates, low, high, sums: ModelSums, n_alloc):
    """The bounds a rule sees with cells in flight: each side's distance from the estimate shrunk as a
    without-replacement width shrinks from ``n_obs`` to ``n_alloc`` draws, by
    ``sqrt((1 / n_alloc - 1 / N) / (1 / n_obs - 1 / N))`` (``N`` the population); the estimates do not
    move. (GP-BUCB's hallucinated observations: Desautels, Krause & Burdick, JMLR 2014.) Only the
    choice sees them; the stopping rule, the certificate and the estimates use the bounds of the
    cells observed."""
    N = sums.population.astype(jnp.float32)
    n, n_new = sums.n_obs.astype(jnp.float32), n_alloc.astype(jnp.float32)
    before = jnp.maximum(1.0 / jnp.maximum(n, 1.0) - 1.0 / N, 0.0)
    after = jnp.maximum(1.0 / jnp.maximum(n_new, 1.0) - 1.0 / N, 0.0)
    factor = jnp.where(before > 0, jnp.sqrt(after / jnp.where(before > 0, before, 1.0)), 1.0)
    return estimates - (estimates - low) * factor, estimates + (high - estimates) * factor


def _held(s: Static, state: BanditState, params: RunParams, looks: StopInputs, in_flight: InFlight, t):
    """Whether an ask holds back: the stopping rule would fire on the bounds as they will be once the
    batches in flight return (`_hallucinated`), so a new batch would likely be paid for after the
    answer is known. A hold spends nothing and waits for one return (it takes a step); it is allowed
    while the run has more than ``c - 1`` spare steps (``BanditConfig.n_steps`` keeps ``8 (c - 1)``:
    ``c - 1`` for asks near the budget's end, the rest for holds), so holds never cost a run its
    budget."""
    config, stop = s.config, s.plugins.stop
    n_alloc = state.sums.n_obs + in_flight.cells
    low, high = _hallucinated(looks.estimates, looks.low, looks.high, state.sums, n_alloc)
    ok, model = confidence.certify(low, high)
    ahead = stop.done(looks._replace(low=low, high=high, certified=looks.certified | ok,
                                     certified_model=jnp.where(looks.certified, looks.certified_model, model)),
                      params.stop)
    left = config.budget - state.spent - jnp.sum(in_flight.cells)
    spare = config.n_steps - t - (left + config.batch_size - 1) // config.batch_size
    return ahead & jnp.any(in_flight.cells > 0) & (spare > config.concurrency - 1)


def _refit_step(s: Static, episode: Episode, state: BanditState, params: RunParams, t, choice: Choice, *,
                due=None) -> BanditState:
    """Step 2: when ``due`` (default: ``refit_due(t)``) and the step spends, refit U on all observed
    cells and refresh the prediction sums and the estimator.

    ``due`` is a Python bool or an *unbatched* traced bool (it depends on the
    step only), so under ``vmap`` it stays a real ``lax.cond`` and plain steps
    never pay for a refit. Given a traced step ``t`` (unbatched too), the refit
    visits only the log chunks that steps ``1 .. t - 1`` may have filled
    (`pulse_jax.stats.factorization.FilledPrefix`), so its cost follows the cells
    observed, not the budget; ``t = None`` visits the whole log.
    """
    config, plugins = s
    due = refit_due(config, plugins, t) if due is None else due
    if not plugins.estimator.uses_predictions or due is False:
        return state

    # Only what a refit reads and changes goes through the conditional (`refit_part`: no copies).
    refreshes = plugins.estimator.refreshes

    def refit_if_live(part):
        old = with_refit_part(state, part)
        filled = None if t is None else factorization.FilledPrefix(jnp.maximum(t - 1, 0), log_chunk_slots(config))
        new = refit(episode, old, config.refit_epochs, periodic_numbers(params, episode), filled=filled,
                    carry=config.carry_refit_state)
        if refreshes:
            new = new._replace(estimator=plugins.estimator.refresh(new.estimator, new.sums, config.n_examples,
                                                                   params.estimator))
        return _where_tree(choice.size > 0, refit_part(new, refreshes), part)

    part = refit_part(state, refreshes)
    part = refit_if_live(part) if due is True else jax.lax.cond(due, refit_if_live, lambda part: part, part)
    return with_refit_part(state, part)


def _draw(s: Static, episode: Episode, state: BanditState, params: RunParams, choice: Choice,
          in_flight: InFlight | None = None):
    """Step 3: the batch ``(examples, valid)`` of length B: a uniform ``size``-subset of the model's
    unobserved examples (and not in flight), or, for an estimator with ``draw_weights``, ``size`` of
    them drawn one after another with probabilities proportional to its weights
    (`sampling.weighted_draw`; such a model is never asked while it has a batch in flight)."""
    i, size = choice.model, choice.size
    B, n_obs_i = s.config.batch_size, state.sums.n_obs[i]
    row = state.observed[i]
    if in_flight is not None:   # the examples in flight count as seen: the key and the row skip them
        n_obs_i, row = n_obs_i + in_flight.cells[i], in_flight.rows[i]
    key = sampling.draw_key(episode.examples_key, i, n_obs_i)
    if s.plugins.estimator.draw_weights is not None:
        _, _, weights = _draw_weights(s.plugins, episode, state, params, i)
        return sampling.weighted_draw(key, weights, B), jnp.arange(B) < size
    examples = sampling.draw(key, row, n_obs_i, state.sums.population[i], B)
    return examples, jnp.arange(B) < size


def _draw_weights(plugins: Plugins, episode: Episode, state: BanditState, params: RunParams, i):
    """Model i's predictions on every example, which of them are unseen, and the estimator's draw
    weights (0 off the unseen ones): a function of the state alone, so fixed before the draw."""
    n = episode.V.shape[0]
    f = jax.nn.sigmoid(jnp.matmul(episode.V, state.U[i], precision=factorization.PRECISION))
    unseen = ~sampling.unpack(state.observed[i], n) & ~episode.missing[i]
    return f, unseen, jnp.where(unseen, plugins.estimator.draw_weights(f, unseen, params.estimator), 0.0)


def _pull(plugins: Plugins, episode: Episode, state: BanditState, params: RunParams, batch: Batch) -> Pull:
    """The batch as the estimator sees it: scores and the current predictions, zero past ``size``."""
    i, examples, valid = batch.model, batch.examples, batch.valid
    s = jnp.where(valid, batch.scores, 0.0)
    if plugins.estimator.uses_predictions:
        f = jax.nn.sigmoid(jnp.matmul(episode.V[examples], state.U[i], precision=factorization.PRECISION))
        f = jnp.where(valid, f, 0.0)
    else:
        f = jnp.zeros_like(s)
    design = None if plugins.estimator.draw_weights is None else \
        draw_design(*_draw_weights(plugins, episode, state, params, i), examples, valid)   # the same state
    return Pull(i, batch.size, jnp.sum(s), jnp.sum(f), s, f, valid, design)


def _add_to_sums(sums: ModelSums, pull: Pull, *, refits: bool) -> ModelSums:
    i, s, f = pull.model, pull.scores, pull.preds
    one_hot = (jnp.arange(sums.pred_sum.shape[0]) == i) if refits else None
    # Out of the refit's conditional, the prediction sums are written anew (a one-hot difference, the
    # same numbers): updated in place they would be copied out of it at every step.
    less = (lambda a, x: a.at[i].add(-x)) if one_hot is None else (lambda a, x: a - jnp.where(one_hot, x, 0.0))
    return ModelSums(population=sums.population, n_obs=sums.n_obs.at[i].add(pull.size),
                  n_pulls=sums.n_pulls.at[i].add((pull.size > 0).astype(jnp.int32)),
                  obs_sum=sums.obs_sum.at[i].add(pull.score_sum), obs_sq_sum=sums.obs_sq_sum.at[i].add(jnp.sum(s * s)),
                  pred_sum=less(sums.pred_sum, pull.pred_sum), pred_sq_sum=less(sums.pred_sq_sum, jnp.sum(f * f)))


def _observe(s: Static, episode: Episode, state: BanditState, params: RunParams, t, batch: Batch):
    """Steps 4-5: record the batch's scores (ignored where not ``valid``); ``(state, Told)``, the
    estimator's per-step info and what the batch's cells cost.

    The confidence sequences and the estimator take the batch in from the
    bookkeeping *before* it (everything they use is predictable), then the
    sums, the pull log and the rule take it in, and the recommendation and the
    certificate are brought up to date.
    """
    config, plugins = s
    estimator, n, sums, i = plugins.estimator, config.n_examples, state.sums, batch.model
    pull = _pull(plugins, episode, state, params, batch)
    cs, seq = state.cs, ((), ())
    if estimator.has_interval:
        obs = confidence.Observations(*estimator.proxies(state.estimator, sums, pull, n, params.estimator))
        draws = confidence.Draws(sums.n_obs[i], sums.obs_sum[i], sums.population[i].astype(jnp.float32),
                                 pull.scores, batch.valid)
        levels = _log_inv_alpha(s, params)
        cs, seq = confidence.cs_update_and_bounds(cs, i, draws, obs, levels,
                                                  bet_horizon(config, estimator, state, params, i, levels))
    est, info = estimator.update(state.estimator, sums, pull, n, params.estimator)   # a no-op when size == 0
    observed = state.observed.at[i].set(sampling.mark(state.observed[i], batch.examples, batch.valid))
    log = add_to_log(state.log, t, pull, batch.examples) if estimator.uses_predictions else state.log
    state = state._replace(sums=_add_to_sums(sums, pull, refits=estimator.uses_predictions), estimator=est,
                           observed=observed, log=log,
                           spent=state.spent + batch.size, cs=cs, rule=plugins.rule.update(state.rule, i, batch.size))
    state = state._replace(best=jnp.where(batch.size > 0, _recommend(s, episode, state, params, t), state.best))
    return record_certificate(config, estimator, state, params), \
        Told(info, cells_cost(episode, batch.examples, batch.valid, i), i, *seq)


def _ask(s: Static, episode: Episode, state: BanditState, params: RunParams, t, status: Status, *, follow=None,
         in_flight: InFlight | None = None, blocked=None, due=None) -> tuple[BanditState, Asked]:
    """Step ``t`` up to its batch, given the stopping rule's ``status`` (`stop_status`): the stop
    recorded, the model chosen (`_choose`; ``follow``, a model index or -1 for none, replaces the
    rule's choice, with the usual batch size, and ignores the stop), U refit when ``due`` (None:
    ``refit_due(t)``) and the step spends, the batch drawn (`_draw`)."""
    if follow is None:
        state = _apply_status(state, status, t)
        state, choice = _choose(s, episode, state, params, t, status, blocked=blocked, in_flight=in_flight)
    else:
        i = jnp.clip(follow, 0, s.config.n_models - 1)
        choice = Choice(i, jnp.where((follow >= 0) & (t >= 1), room(s.config, state, i), 0))
    state = _refit_step(s, episode, state, params, t, choice, due=due)
    examples, valid = _draw(s, episode, state, params, choice, in_flight)
    return state, Asked(choice.model, choice.size, examples, valid, jnp.asarray(choice.hold))


def _step(s: Static, episode: Episode, state: BanditState, params: RunParams, t, follow=None, *, due=None):
    """Bandit step ``t`` (1-based; ``t = 0`` is a no-op used for padding): the stopping rule's status,
    `_ask` (choose, refit when due, draw), `_tell` the batch's true scores; ``(state, StepInfo)``."""
    before = state
    status = _stop_status(s, state, params, t)
    state, asked = _ask(s, episode, state, params, t, status, follow=follow, due=due)
    batch = Batch(asked.model, asked.size, asked.examples, asked.valid, episode.scores[asked.model, asked.examples])
    state, told = _observe(s, episode, state, params, t, batch)
    return state, _record(s, before, state, params, jnp.where(asked.size > 0, asked.model, -1), told, status=status)


def _record(s: Static, before: BanditState, state: BanditState, params: RunParams, chosen, told: Told, *,
            status: Status | None = None) -> StepInfo:
    """A step's `StepInfo`, from the state ``before`` it and its final ``state``: the stop fired in it
    if ``state`` has stopped and ``before`` had not (its claim is ``status``'s), and the half-widths
    are taken when the config keeps snapshots."""
    config, (estimator, _, stop) = s
    m, empty = config.n_models, jnp.zeros((0,), jnp.float32)
    claim = jnp.zeros(m, bool) if status is None or stop.claim is no_claim else status.claim
    widths = Snapshots(*half_widths(config, estimator, state, params)) if config.snapshot_budgets else ()
    estimates = low = high = empty
    if config.record_estimates:
        low, high = interval_bounds(estimator, state, config, params, "cs")
        estimates = current_estimates(estimator, state, config.n_examples, params)
    return StepInfo(state.best, state.spent, chosen, told, estimates, low, high, before.spent,
                    jnp.asarray(state.stopped & ~before.stopped), claim, widths)


def _bounds(s: Static, state: BanditState, params: RunParams):
    """``(estimates, low, high)`` of every model now (the live report's numbers)."""
    low, high = interval_bounds(s.plugins.estimator, state, s.config, params)
    return current_estimates(s.plugins.estimator, state, s.config.n_examples, params), low, high


class Kernel(NamedTuple):
    """The kernel of one run: its static half and seven pure functions of the dynamic half, each in the
    order ``(episode, state, params, t, ...)`` (``params`` a `pulse_jax.RunParams`). Simulations (the
    step scan, the blocked and phased loops), the concurrent event loop and the live selector all use
    the same kernel object.

    * ``init(key, scores, V, params, start=Start()) -> (episode, state)``: the first look and fit;
    * ``stop_status(state, params, t, in_flight=None, logged=None) -> Status``: everything the stopping
      rule decides at step ``t``, in one place (done, claim, focus, and the hold with batches in
      flight; ``logged``: what a replayed log did at this step);
    * ``ask(episode, state, params, t, status, *, follow=None, in_flight=None, blocked=None, due=None)
      -> (state, Asked)``: the stop recorded, the model chosen by the sampling rule (given the
      status's focus), U refit when due, the batch drawn;
    * ``tell(episode, state, params, t, batch) -> (state, Told)``: a `Batch`'s scores observed (the
      estimator's info, what the cells cost, the told model's sequences each on its own);
    * ``step(episode, state, params, t, follow=None, *, due=None) -> (state, StepInfo)``:
      ``stop_status``, ``ask``, ``tell`` the true scores, ``record`` (``t = 0``: a step that spends
      nothing);
    * ``bounds(state, params) -> (estimates, low, high)``: every model's estimate and interval now;
    * ``record(before, state, params, chosen, told, *, status=None) -> StepInfo``: what a step reports
      once its state is final (``before``: the state it started from; ``status``: its stop's).

    The state holds only what the next step reads; what only a report reads (money, the claim made
    when the stop fired, the interval snapshots, each sequence's running bounds) is in the `StepInfo`, which the drivers fold into a
    `pulse_jax.engine.run_trace.Trace`.

    Whether step ``t`` refits is `pulse_jax.engine.config.refit_due`.
    """

    config: BanditConfig
    plugins: Plugins
    init: InitFn
    stop_status: StatusFn
    ask: AskFn
    tell: TellFn
    step: StepFn
    bounds: BoundsFn
    record: RecordFn


def build_kernel(config: BanditConfig, plugins: Plugins) -> Kernel:
    """The `Kernel` of ``plugins`` (a `Plugins`, or an estimator with the default rules) on ``config``:
    closures over the static half (``config``, the plug-ins), so nothing static is passed again."""
    s = Static(config, as_plugins(plugins))

    def init(key, scores, V, params, start=Start()):
        return _init(s, key, scores, V, params, start)

    def stop_status(state, params, t, in_flight=None, logged=None):
        return _stop_status(s, state, params, t, in_flight, logged)

    def ask(episode, state, params, t, status, *, follow=None, in_flight=None, blocked=None, due=None):
        return _ask(s, episode, state, params, t, status, follow=follow, in_flight=in_flight, blocked=blocked,
                    due=due)

    def tell(episode, state, params, t, batch):
        return _observe(s, episode, state, params, t, batch)

    def step(episode, state, params, t, follow=None, *, due=None):
        return _step(s, episode, state, params, t, follow, due=due)

    def bounds(state, params):
        return _bounds(s, state, params)

    def record(before, state, params, chosen, told, *, status=None):
        return _record(s, before, state, params, chosen, told, status=status)

    return Kernel(config, s.plugins, init, stop_status, ask, tell, step, bounds, record)
