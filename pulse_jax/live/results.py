"""What a live selection reports at any time, as a function of its state: the `Report` (ranking,
estimates with intervals, the certificate, the audit trail) and the paired difference of two models."""
from __future__ import annotations

import jax
import numpy as np

from pulse_jax import stopping
from pulse_jax.errors import require
from pulse_jax.fileio.jsonable import plain_number
from pulse_jax.live import core
from pulse_jax.live.report import Report


def _numbers(selector):
    """``(estimates, n_obs, n_pulls, low, high, separated, certified model)`` now; during the first look
    the sample means of what has been seen, with no bound yet."""
    m = len(selector.models)
    live = selector._live
    if live.bandit is not None:
        est, sums, low, high, (ok, certified) = jax.device_get(selector._programs.summary(live.bandit, selector._params))
        return (np.asarray(est, np.float64), np.asarray(sums.n_obs), np.asarray(sums.n_pulls),
                np.asarray(low, np.float64), np.asarray(high, np.float64), bool(ok), int(certified))
    n_obs = np.array([len(selector._told[i]) for i in range(m)])
    est = np.where(n_obs > 0, selector._first.scores.sum(axis=1) / np.maximum(n_obs, 1), np.nan)
    return est, n_obs, (n_obs > 0).astype(int), np.zeros(m), np.ones(m), False, 0


def report(selector) -> Report:
    """``selector``'s `Report` now."""
    models, config, stop, live = selector.models, selector.config, selector.stop, selector._live
    m, interval = len(models), selector.plugins.estimator.has_interval
    est, n_obs, n_pulls, low, high, separated, certified = _numbers(selector)
    if not interval:
        low, high = np.full(m, np.nan), np.full(m, np.nan)
    leader = int(np.argmax(np.where(n_obs > 0, est, -np.inf)))
    tied: tuple = ()
    if interval:
        leader = certified if separated else leader
        tied = tuple(models[j] for j in range(m) if j != leader and not high[j] < low[leader])
    groups = tuple(tuple(models[i] for i in g) for g in stopping.groups(est, low, high)) \
        if interval and live.bandit is not None else ()
    claim = core.claim_now(selector._programs, live, selector._params, selector._flight()) \
        if live.bandit is not None else np.zeros(m, bool)
    names = [models[i] for i in np.flatnonzero(claim)]
    failed, retries = selector.ledger.failures()
    return Report(selector.method, selector.seed, models, est, low, high, n_obs, n_pulls, selector.spent,
                  config.budget, selector.delta, models[leader], separated if interval else None, tied,
                  selector.evaluated(), bool(float(selector.params.cs_simultaneous) >= 1.0), stop=stop.name,
                  stopped=core.stopped(live), claimed=tuple(names),
                  certificate=stop.statement(names, selector.delta, selector.params.stop),
                  finished=live.finished or selector.spent >= config.budget, groups=groups,
                  failed_attempts=failed, retries=retries, after_stop=selector._after_stop,
                  stops_early=stop.stops_early)


def paired_difference(selector, a: str, b: str) -> dict:
    """``mu_a - mu_b`` with an anytime-valid interval, and the mean of ``S_a - S_b`` on the shared examples.

    The interval is the difference of the two confidence sequences, ``[low_a - high_b, high_a - low_b]``:
    it holds at every look, for every pair at once, with probability >= 1 - delta when the sequences are
    simultaneous (``cs_simultaneous = 1``). At certification levels (``cs_simultaneous = 0``) one pair's
    interval holds on its own with probability >= 1 - delta (1 + 1/m): each model's lower sides fail with
    at most delta / (2 m), each upper side with at most delta / 2. ``common_mean`` (over the examples
    both models have seen) is descriptive only: it carries no guarantee of its own.
    """
    models = selector.models
    require(a in models and b in models, f"unknown model {a if a not in models else b!r}")
    ia, ib = models.index(a), models.index(b)
    now = selector.result()
    told = selector._told
    common = sorted(set(told[ia]) & set(told[ib]))
    common_mean = float(np.mean([float(told[ia][j]) - float(told[ib][j]) for j in common])) if common else None
    return {"models": (a, b), "estimate": plain_number(now.estimates[ia] - now.estimates[ib]),
            "low": plain_number(now.low[ia] - now.high[ib]), "high": plain_number(now.high[ia] - now.low[ib]),
            "n_common": len(common), "common_mean": common_mean}
