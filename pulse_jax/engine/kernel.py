"""The kernel: one bandit step, ``select -> refit (when due) -> draw -> observe``, over an explicit
`pulse_jax.engine.state.BanditState`.

Every function is pure and takes its arguments in one order: ``(config, plugins, episode, state,
params, t, ...)``. ``config`` and ``plugins`` are static (hashable); everything else may be traced.
`build_kernel` binds the first two, for the drivers (`pulse_jax.engine.drivers`) and
live selection alike.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from pulse_jax.stats import confidence, factorization, without_replacement as sampling
from pulse_jax.engine.bookkeeping import (Certificate, Snapshots, current_estimates, interval_bounds,
                                          record_certificate, take_snapshots)
from pulse_jax.engine.config import BanditConfig, Plugins, log_chunk_slots, plugins_of, refit_due, traced_params
from pulse_jax.engine.state import (BanditState, Episode, PullLog, StepRecord, draw_keys, initial_draws,
                                    observed_blocks)
from pulse_jax.estimators.base import DrawDesign, Estimator, Ledger, Pull, draw_design
from pulse_jax.stats.factorization import FitSettings
from pulse_jax.rules.base import RuleInputs
from pulse_jax.stopping.base import StopInputs, no_claim
from pulse_jax.stats.ties import BEST, random_argmax, tie_uniform


def _where_tree(pred, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)


def adam_refit(epochs: int, learning_rate, l2, shrink=0.0, row_prior=None) -> FitSettings:
    """The bandit's refit schedule: ``epochs`` (static) Adam steps; rate, L2 weight and the prior's
    weight (``BanditParams.refit_prior``) may be traced; ``row_prior`` is the episode's
    `pulse_jax.stats.factorization.RowPrior` (None: the candidates' own mean row)."""
    return FitSettings(epochs, l2, optax.adam(learning_rate), shrink, row_prior)


def _refit(episode: Episode, state: BanditState, settings: FitSettings, with_log: bool = True,
           filled: factorization.FilledPrefix | None = None) -> BanditState:
    """Refit U on every observed cell (V frozen, warm start); recompute F and Phi.

    ``F_i``/``Phi_i`` (sums of predictions and their squares over model i's
    unobserved cells) are the dense row sums minus the observed cells' part.
    ``with_log=False`` fits the initial batches alone; ``filled`` visits only the
    log's used slots (see `pulse_jax.stats.factorization.FilledPrefix`).
    """
    blocks = observed_blocks(episode, state, with_log)
    filled = filled if len(blocks) > 1 else None
    visits = factorization.plan_visits(episode.V, blocks, filled)
    n = episode.scores.shape[1]
    U = factorization.refit_rows_on_blocks(state.U, episode.V, blocks, n, settings, filled, visits)
    all_sum, all_sq_sum = factorization.prediction_row_sums(U, episode.V, episode.missing)   # a model's benchmark only
    seen_sum, seen_sq_sum = factorization.block_prediction_sums(U, episode.V, blocks, filled, visits)
    ledger = state.ledger._replace(pred_sum=all_sum - seen_sum, pred_sq_sum=all_sq_sum - seen_sq_sum)
    return state._replace(U=U, ledger=ledger)


def _log_inv_alpha(config: BanditConfig, plugins: Plugins, params):
    """The ``(lower, upper)`` levels of the confidence sequences (`confidence.cs_levels`)."""
    return confidence.cs_levels(params.delta, config.n_models, plugins.estimator.n_sequences, params.cs_simultaneous)


def _first_state(config: BanditConfig, plugins: Plugins, first, observed, population, U, params) -> BanditState:
    """The state after the initial batches ``first`` (``(m, T0 B)`` scores), before any fit (``U`` the rows
    the first fit starts from)."""
    m, B, C = config.n_models, config.batch_size, plugins.estimator.n_sequences
    zeros = jnp.zeros(m, jnp.float32)
    ledger = Ledger(jnp.full(m, config.init_cells_per_model, jnp.int32), jnp.ones(m, jnp.int32), first.sum(1),
                    (first * first).sum(1), zeros, zeros, population)
    # One log slot per step, rounded up to whole refit chunks (one empty slot when there are no steps).
    chunk = log_chunk_slots(config)
    slots = -(-max(config.n_steps, 1) // chunk) * chunk if plugins.estimator.uses_predictions else 0
    log = PullLog(jnp.zeros(slots, jnp.int32), jnp.zeros((slots, B), jnp.int32), jnp.zeros((slots, B), jnp.float32),
                  jnp.zeros(slots, jnp.int32))
    # The initial batches enter the confidence sequences as raw scores: no prediction exists yet
    # (for PULSE this is lambda = 0), and each batch is in its sampler's uniform draw order.
    cs = confidence.cs_init(m, C, config.cs_grid)
    if plugins.estimator.has_interval:
        rows = jnp.broadcast_to(first[:, None], (m, C) + first.shape[1:])
        cs = confidence.cs_update_all(cs, jnp.zeros(m, jnp.int32), zeros, population.astype(jnp.float32), rows,
                                      jnp.zeros_like(rows), jnp.ones_like(rows), first, jnp.ones(first.shape, bool),
                                      _log_inv_alpha(config, plugins, params), params.cs_horizon)
    nan = jnp.full((len(config.snapshot_budgets), m), jnp.nan, jnp.float32)
    return BanditState(ledger, None, U, observed, first, log,
                       jnp.int32(config.init_cells), jnp.int32(0), cs, Certificate(jnp.int32(-1), jnp.int32(-1)),
                       Snapshots(nan, nan), plugins.rule.init(config), jnp.bool_(False), jnp.zeros(m, bool))


def init(config: BanditConfig, plugins: Plugins, key, scores, V, params, init_U=None,
         row_prior=None) -> tuple[Episode, BanditState]:
    """Stage 1: the repetition's draws, the initial batches (``scores`` needs only their cells; NaN
    marks a cell a model has no score for) and the first fit of U, which starts from ``init_U``
    (``(m, r)``; zeros when None) and, like every refit, is pulled towards ``row_prior``
    (a `pulse_jax.stats.factorization.RowPrior`; None: the candidates' mean row) with weight
    ``params.refit_prior``."""
    params = traced_params(plugins, params)
    estimator = plugins.estimator
    model_order, examples_key, tie_key = draw_keys(key, config.n_models)
    missing = jnp.isnan(scores)
    scores = jnp.where(missing, 0.0, scores)
    population = jnp.sum(~missing, axis=1).astype(jnp.int32)
    first_examples, observed = initial_draws(examples_key, config, missing, population)
    episode = Episode(scores, missing, V, model_order, first_examples, examples_key, tie_key, row_prior)
    first = jnp.take_along_axis(scores, first_examples, axis=1)
    U = jnp.zeros((config.n_models, V.shape[1]), jnp.float32) if init_U is None else jnp.asarray(init_U, jnp.float32)
    state = _first_state(config, plugins, first, observed, population, U, params)
    if estimator.uses_predictions:
        settings = adam_refit(config.init_refit_epochs, params.init_refit_lr, params.init_refit_l2,
                              params.refit_prior, episode.row_prior)
        state = _refit(episode, state, settings, with_log=False)     # nothing is in the log yet
    state = state._replace(estimator=estimator.init(state.ledger, params.estimator))
    state = state._replace(best=recommend(config, plugins, episode, state, 0, params))
    state = record_certificate(config, estimator, state, params)
    return episode, take_snapshots(config, estimator, state, params, jnp.int32(-1))


def recommend(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, t, params):
    """The run's best guess: ``argmax mu_hat`` over the models the rule deems eligible (random ties)."""
    mu = current_estimates(plugins.estimator, state, config.n_examples, params)
    if plugins.rule.eligible is not None:
        mu = jnp.where(plugins.rule.eligible(state.rule), mu, -jnp.inf)
    return random_argmax(tie_uniform(episode.key, t, BEST), mu, episode.model_order)


def room(config: BanditConfig, state: BanditState, i, reserved=0):
    """``B' = min(B, |U_i|, budget left - reserved)`` for model ``i`` (never below 0)."""
    ledger = state.ledger
    size = jnp.minimum(jnp.minimum(config.batch_size, ledger.population[i] - ledger.n_obs[i]),
                       config.budget - state.spent - reserved)
    return jnp.maximum(size, 0)


def select(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t,
           blocked=None, reserved=0):
    """Step 1: ``(state, i, size)``, the model the sampling rule chooses and the batch size ``B'``.

    The rule sees the models that are not exhausted (nor ``blocked``: a live
    selector blocks models with a batch in flight) and, if it asks, the
    simultaneous bounds. ``size = 0`` means nothing to do: always at ``t = 0``,
    when the rule chooses no model, and once the stopping rule says done. The
    rule's state is kept from step 1 on (at ``t = 0`` nothing happens).
    """
    params = traced_params(plugins, params)
    estimator, rule, stop = plugins
    m, ledger = config.n_models, state.ledger
    exhausted = ledger.n_obs >= ledger.population
    active = ~exhausted if blocked is None else ~exhausted & ~blocked
    looks = _stop_inputs(config, plugins, state, params, t)
    inputs = RuleInputs(t, looks.estimates, looks.low, looks.high, ledger.n_obs, ledger.n_pulls, active, exhausted,
                        episode.model_order, episode.key)
    i, rule_state = rule.choose(state.rule, inputs, params.rule)
    valid = (i >= 0) & (i < m)
    i = jnp.clip(i, 0, m - 1).astype(jnp.int32)
    done = state.stopped | stop.done(looks, params.stop)
    go = valid & active[i] & (t >= 1) & ~done
    moves = (t >= 1) & ~done           # a stopped run changes nothing, its rule's state included
    if rule.eligible is not None:      # the recommendation follows the rule's eligible set when it changes
        changed = moves & jnp.any(rule.eligible(rule_state) != rule.eligible(state.rule))
        best = recommend(config, plugins, episode, state._replace(rule=rule_state), t, params)
        state = state._replace(best=jnp.where(changed, best, state.best))
    if stop.claim is no_claim:      # a rule that claims nothing: nothing to track
        claimed = state.claimed
    else:                           # the claim is the one made when the rule fires
        claimed = jnp.where(done & ~state.stopped & (t >= 1), stop.claim(looks, params.stop), state.claimed)
    state = state._replace(rule=_where_tree(moves, rule_state, state.rule), stopped=state.stopped | (done & (t >= 1)),
                           claimed=claimed)
    return state, i, jnp.where(go, room(config, state, i, reserved), 0)


def _stop_inputs(config: BanditConfig, plugins: Plugins, state: BanditState, params, t) -> StopInputs:
    """What the rules see at step ``t``: estimates, and the bounds when a rule needs them (else NaN)."""
    estimator, rule, stop = plugins
    mu = current_estimates(estimator, state, config.n_examples, params)
    low, high = interval_bounds(estimator, state, config, params) if rule.needs_interval or stop.needs_interval \
        else (jnp.full(config.n_models, jnp.nan, jnp.float32),) * 2
    return StopInputs(t, state.spent, config.budget, mu, low, high, state.certified.spent >= 0, state.certified.model)


def refit(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, size, due):
    """Step 2: when ``due`` and the step spends (``size > 0``), refit U on all observed cells and refresh
    the prediction sums and the estimator.

    ``due`` is a Python bool or an *unbatched* traced bool (it depends on the
    step only), so under ``vmap`` it stays a real ``lax.cond`` and plain steps
    never pay for a refit. Given a traced step ``t`` (unbatched too), the refit
    visits only the log chunks that steps ``1 .. t - 1`` may have filled
    (`pulse_jax.stats.factorization.FilledPrefix`), so its cost follows the cells
    observed, not the budget; ``t = None`` visits the whole log.
    """
    params = traced_params(plugins, params)
    if not plugins.estimator.uses_predictions or due is False:
        return state

    def refit_if_live(state):
        settings = adam_refit(config.refit_epochs, params.refit_lr, params.refit_l2, params.refit_prior,
                              episode.row_prior)
        filled = None if t is None else factorization.FilledPrefix(jnp.maximum(t - 1, 0), log_chunk_slots(config))
        new = _refit(episode, state, settings, filled=filled)
        new = new._replace(estimator=plugins.estimator.refresh(new.estimator, new.ledger, config.n_examples,
                                                               params.estimator))
        return _where_tree(size > 0, new, state)

    return refit_if_live(state) if due is True else jax.lax.cond(due, refit_if_live, lambda s: s, state)


def draw(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, i, size, params=None):
    """Step 3: the batch ``(examples, valid)`` of length B: a uniform ``size``-subset of model i's
    unobserved examples, or, for an estimator with ``draw_weights``, ``size`` of them drawn one
    after another with probabilities proportional to its weights (`sampling.weighted_draw`;
    ``params`` the run's `pulse_jax.RunParams`, the defaults when None)."""
    B, n_obs_i = config.batch_size, state.ledger.n_obs[i]
    key = sampling.draw_key(episode.examples_key, i, n_obs_i)
    if plugins.estimator.draw_weights is not None:
        params = traced_params(plugins, params)
        _, _, weights = _draw_weights(plugins, episode, state, i, params)
        return sampling.weighted_draw(key, weights, B), jnp.arange(B) < size
    examples = sampling.draw(key, state.observed[i], n_obs_i, state.ledger.population[i], B)
    return examples, jnp.arange(B) < size


def _draw_weights(plugins: Plugins, episode: Episode, state: BanditState, i, params):
    """Model i's predictions on every example, which of them are unseen, and the estimator's draw
    weights (0 off the unseen ones): a function of the state alone, so fixed before the draw."""
    n = episode.V.shape[0]
    f = jax.nn.sigmoid(jnp.matmul(episode.V, state.U[i], precision=factorization.PRECISION))
    unseen = ~sampling.unpack(state.observed[i], n) & ~episode.missing[i]
    return f, unseen, jnp.where(unseen, plugins.estimator.draw_weights(f, unseen, params.estimator), 0.0)


def _design(plugins: Plugins, episode: Episode, state: BanditState, i, examples, valid, params) -> DrawDesign:
    """The `DrawDesign` of a weighted pull of ``examples`` (recomputed from the same state)."""
    return draw_design(*_draw_weights(plugins, episode, state, i, params), examples, valid)


def _pull(plugins: Plugins, episode: Episode, state: BanditState, i, size, examples, valid, scores, params) -> Pull:
    """The batch as the estimator sees it: scores and the current predictions, zero past ``size``."""
    s = jnp.where(valid, scores, 0.0)
    if plugins.estimator.uses_predictions:
        f = jax.nn.sigmoid(jnp.matmul(episode.V[examples], state.U[i], precision=factorization.PRECISION))
        f = jnp.where(valid, f, 0.0)
    else:
        f = jnp.zeros_like(s)
    design = _design(plugins, episode, state, i, examples, valid, params) if plugins.estimator.draw_weights is not None \
        else None
    return Pull(i, size, jnp.sum(s), jnp.sum(f), s, f, valid, design)


def _add_to_ledger(ledger: Ledger, pull: Pull) -> Ledger:
    i, s, f = pull.model, pull.scores, pull.preds
    return Ledger(population=ledger.population, n_obs=ledger.n_obs.at[i].add(pull.size),
                  n_pulls=ledger.n_pulls.at[i].add((pull.size > 0).astype(jnp.int32)),
                  obs_sum=ledger.obs_sum.at[i].add(pull.score_sum), obs_sq_sum=ledger.obs_sq_sum.at[i].add(jnp.sum(s * s)),
                  pred_sum=ledger.pred_sum.at[i].add(-pull.pred_sum),
                  pred_sq_sum=ledger.pred_sq_sum.at[i].add(-jnp.sum(f * f)))


def _add_to_log(log: PullLog, t, pull: Pull, examples) -> PullLog:
    """Slot ``t - 1`` holds step ``t``'s pull (left as it was when the step spends nothing)."""
    slot, live = jnp.maximum(t - 1, 0), pull.size > 0
    keep = lambda new, old: jnp.where(live, new, old)   # noqa: E731
    return PullLog(log.models.at[slot].set(keep(pull.model, log.models[slot])),
                   log.examples.at[slot].set(keep(examples, log.examples[slot])),
                   log.scores.at[slot].set(keep(pull.scores, log.scores[slot])),
                   log.sizes.at[slot].set(keep(pull.size, log.sizes[slot])))


def observe(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, i, size,
            examples, valid, scores):
    """Steps 4-5: record the batch's ``scores`` (length B, ignored where not ``valid``); ``(state, info)``.

    The confidence sequences and the estimator take the batch in from the
    bookkeeping *before* it (everything they use is predictable), then the
    ledger, the pull log and the rule take it in, and the recommendation, the
    certificate and the snapshots are brought up to date.
    """
    params = traced_params(plugins, params)
    estimator, n, ledger = plugins.estimator, config.n_examples, state.ledger
    pull = _pull(plugins, episode, state, i, size, examples, valid, scores, params)
    cs = state.cs
    if estimator.has_interval:
        y, lower, width = estimator.proxies(state.estimator, ledger, pull, n, params.estimator)
        cs = confidence.cs_update(cs, i, ledger.n_obs[i], ledger.obs_sum[i], ledger.population[i].astype(jnp.float32),
                                  y, lower, width, pull.scores, valid, _log_inv_alpha(config, plugins, params),
                                  params.cs_horizon)
    est, info = estimator.update(state.estimator, ledger, pull, n, params.estimator)   # a no-op when size == 0
    observed = state.observed.at[i].set(sampling.mark(state.observed[i], examples, valid))
    log = _add_to_log(state.log, t, pull, examples) if estimator.uses_predictions else state.log
    spent_before = state.spent
    state = state._replace(ledger=_add_to_ledger(ledger, pull), estimator=est, observed=observed, log=log,
                           spent=state.spent + size, cs=cs, rule=plugins.rule.update(state.rule, i, size))
    state = state._replace(best=jnp.where(size > 0, recommend(config, plugins, episode, state, t, params), state.best))
    state = record_certificate(config, estimator, state, params)
    return take_snapshots(config, estimator, state, params, spent_before), info


def choose(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, follow=None):
    """Step ``t``'s choice ``(state, i, size)``: `select`, or, given ``follow`` (a model index, -1 for
    none), that model with the batch size of the usual rule."""
    if follow is None:
        return select(config, plugins, episode, state, params, t)
    i = jnp.clip(follow, 0, config.n_models - 1)
    return state, i, jnp.where((follow >= 0) & (t >= 1), room(config, state, i), 0)


def play(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, i, size):
    """The rest of step ``t`` once model ``i`` is chosen (and U refit, when due): `draw` ``size`` of its
    examples, `observe` their true scores; ``(state, record)``."""
    examples, valid = draw(config, plugins, episode, state, i, size, params)
    state, info = observe(config, plugins, episode, state, params, t, i, size, examples, valid,
                          episode.scores[i, examples])
    return state, _record(config, plugins, state, params, jnp.where(size > 0, i, -1), info)


def step(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, follow=None):
    """Bandit step ``t`` (1-based; ``t = 0`` is a no-op used for padding): `choose` (`select`), `refit`
    when due, `play` (`draw`, `observe` the true scores); ``(state, record)``. ``follow`` (a model
    index, -1 for none) replaces the rule's choice; the batch size follows the usual rule."""
    params = traced_params(plugins, params)
    state, i, size = choose(config, plugins, episode, state, params, t, follow)
    state = refit(config, plugins, episode, state, params, t, size, refit_due(config, plugins, t))
    return play(config, plugins, episode, state, params, t, i, size)


def _record(config: BanditConfig, plugins: Plugins, state: BanditState, params, chosen, info) -> StepRecord:
    empty = jnp.zeros((0,), jnp.float32)
    if not config.record_estimates:
        return StepRecord(state.best, state.spent, chosen, info, empty, empty, empty)
    low, high = interval_bounds(plugins.estimator, state, config, params, "cs")
    estimates = current_estimates(plugins.estimator, state, config.n_examples, params)
    return StepRecord(state.best, state.spent, chosen, info, estimates, low, high)


def bounds(config: BanditConfig, plugins: Plugins, state: BanditState, params):
    """``(estimates, low, high)`` of every model now (the live report's numbers)."""
    params = traced_params(plugins, params)
    low, high = interval_bounds(plugins.estimator, state, config, params)
    return current_estimates(plugins.estimator, state, config.n_examples, params), low, high


class Kernel(NamedTuple):
    """The kernel functions above with ``(config, plugins)`` bound: simulation and live selection share them.

    * ``init(key, scores, V, params) -> (episode, state)``;
    * ``select(episode, state, params, t, blocked=None, reserved=0) -> (state, i, size)``;
    * ``refit(episode, state, params, t, size, due) -> state``;
    * ``draw(episode, state, i, size, params=None) -> (examples, valid)``;
    * ``observe(episode, state, params, t, i, size, examples, valid, scores) -> (state, info)``;
    * ``step(episode, state, params, t, follow=None) -> (state, record)``;
    * ``bounds(state, params) -> (estimates, low, high)``;
    * ``refit_due(t)``;
    * ``stop_status(state, params, t) -> (done, claim)``.
    """

    init: Any
    select: Any
    refit: Any
    draw: Any
    observe: Any
    step: Any
    bounds: Any
    refit_due: Any
    stop_status: Any


def build_kernel(config: BanditConfig, estimator: Estimator) -> Kernel:
    """The kernel of ``estimator`` and ``config``'s rule and stopping rule (see `Kernel`)."""
    plugins = plugins_of(config, estimator)
    bind = lambda f: functools.partial(f, config, plugins)   # noqa: E731
    return Kernel(bind(init), bind(select), bind(refit), bind(draw), bind(observe), bind(step),
                  bind(bounds), bind(refit_due), bind(stop_status))


def finished(config: BanditConfig, plugins: Plugins, state: BanditState, params, t):
    """Whether every step from ``t`` on is idle: the run has stopped, or stops at step ``t`` (the
    same check as `select`'s, on the same inputs)."""
    return stop_status(config, plugins, state, params, t)[0]


def stop_status(config: BanditConfig, plugins: Plugins, state: BanditState, params, t):
    """``(done, claim)``: whether the stopping rule stops the run at step ``t`` (or already has), and the
    ``(m,)`` models its certificate names now (`pulse_jax.stopping.StoppingRule.claim`). Simulation
    and live selection both stop through this one check."""
    params = traced_params(plugins, params)
    looks = _stop_inputs(config, plugins, state, params, t)
    return state.stopped | plugins.stop.done(looks, params.stop), plugins.stop.claim(looks, params.stop)


def idle_record(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t):
    """The record of a step that spends nothing (what every step of a stopped run records)."""
    _, record = step(config, plugins, episode, state, params, t)
    return record
