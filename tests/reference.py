"""A plain NumPy loop of the same algorithm, for step-for-step agreement tests.

Written from the derivations in docs/confidence.md, independently of the engine: it shares only the
random numbers (the Fisher-Yates choices of each draw, the model order, the
tie-breaking uniforms), which it takes from ``pulse_jax.engine.draw_keys``,
``pulse_jax.stats.without_replacement.fisher_yates_choices`` and ``tie_uniform``. Everything
else -- the swaps that turn choices into a batch, selection, the three
estimators, the lambda rule, the masked BCE gradient and Adam -- is
re-implemented here in float64, and so are the confidence sequences (one draw
at a time, from the formulas in docs/confidence.md), certification and the LUCB rule.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import engine
from pulse_jax.stats import without_replacement as sampling, ties


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _adam_refit(U, V, S, mask, epochs, lr, lam, b1=0.9, b2=0.999, eps=1e-8, carried=None):
    """Full-batch Adam on the masked BCE + L2 objective, V frozen. ``carried``: a dict holding
    Adam's ``mu``, ``nu`` and step count, continued and updated in place (None: a fresh run)."""
    m, n = S.shape
    count = max(mask.sum(), 1)
    state = carried if carried is not None else {}
    mu = state.get("mu", np.zeros_like(U))
    nu = state.get("nu", np.zeros_like(U))
    done = state.get("steps", 0)
    for step in range(done + 1, done + epochs + 1):
        P = _sigmoid(U @ V.T)
        grad = ((P - S) * mask) @ V / count + lam / (m + n) * U
        mu = b1 * mu + (1 - b1) * grad
        nu = b2 * nu + (1 - b2) * grad * grad
        mhat = mu / (1 - b1**step)
        nhat = nu / (1 - b2**step)
        U = U - lr * mhat / (np.sqrt(nhat) + eps)
    state.update(mu=mu, nu=nu, steps=done + epochs)
    return U


def _random_argmax(u, values, order):
    v = values[order]
    tied = v == v.max()
    count = tied.sum()
    k = min(int(np.floor(u * count)), count - 1)
    return int(order[np.argmax(np.cumsum(tied) > k)])


def reference_run(scores, V, config: engine.BanditConfig, plugins, key, params=None):
    """Return a dict of per-step records and final estimates, like ``RunResult``. ``plugins``: a
    `pulse_jax.Plugins` or the estimator's name (with the index rule and the budget stop)."""
    plugins = engine.as_plugins(plugins)
    method = plugins.estimator.name
    S = np.asarray(scores, np.float64)
    avail = ~np.isnan(S)                  # missing cells (NaN) are not part of a model's benchmark
    S = np.where(avail, S, 0.0)
    N = avail.sum(1)                      # each model's population
    V = np.asarray(V, np.float64)
    m, n = S.shape
    # The run's numbers as the engine resolves them: the engine's, and the rule's own (RunParams).
    params = engine.resolve_params(params, plugins)
    init_lr, refit_lr = float(params.init_refit_lr), float(params.refit_lr)
    a = float(params.rule.exploration) if "exploration" in getattr(params.rule, "_fields", ()) else 1.0
    B, T, tau = config.batch_size, config.budget, config.refit_every
    model_order, examples_key, tie_key = engine.draw_keys(key, m)
    model_order = np.asarray(model_order)
    uniforms = np.asarray(jax.vmap(lambda t: jnp.stack([ties.tie_uniform(tie_key, t, w) for w in range(5)]))(
        jnp.arange(config.n_steps + 1)))
    uses_pred = method in ("pulse", "naive")

    # confidence sequences: C per model (UCB-E: raw scores; PULSE: raw and AIPW proxies)
    C = {"ucbe": 1, "pulse": 2, "naive": 0}[method]
    log_ia = np.log(2 * m * max(C, 1) / float(params.delta))
    cs = {k: np.zeros((m, max(C, 1))) for k in ("A", "D", "P", "xs", "dv")}
    cs_low, cs_high = np.zeros(m), np.ones(m)
    carried = {}                          # the periodic refits' Adam run (BanditConfig.carry_refit_state)

    def cs_take(i, rows, scores_in_order, n_seen, seen_sum):
        """Sequences of model i take a batch: rows = [(y, lower, width)] per sequence, draw order."""
        lows, highs = [], []
        for c, (y, lower, width) in enumerate(rows):
            seen = seen_sum
            for k in range(len(scores_in_order)):
                s_ = n_seen + k + 1
                x = min(max((y[k] - lower[k]) / width[k], 0.0), 1.0)
                xhat_prev = (0.5 + cs["xs"][i, c]) / s_
                sig2 = (0.25 + cs["dv"][i, c]) / s_
                beta = min(np.sqrt(2 * log_ia / (sig2 * s_ * np.log1p(s_))), 0.5)
                cs["A"][i, c] += beta / width[k] * (y[k] + seen / (N[i] - s_ + 1))
                cs["D"][i, c] += beta / width[k] * N[i] / (N[i] - s_ + 1)
                cs["P"][i, c] += (x - xhat_prev) ** 2 * (-np.log1p(-beta) - beta)
                cs["xs"][i, c] += x
                cs["dv"][i, c] += (x - (0.5 + cs["xs"][i, c]) / (s_ + 1)) ** 2
                seen += scores_in_order[k]
            A, D, P = cs["A"][i, c], cs["D"][i, c], cs["P"][i, c]
            lows.append(min(max(A / D - (log_ia + P) / D, 0.0), 1.0))
            highs.append(min(max(A / D + (log_ia + P) / D, 0.0), 1.0))
        cs_low[i] = max(cs_low[i], max(lows))
        cs_high[i] = min(cs_high[i], min(highs))

    mask = np.zeros((m, n), bool)
    n_obs = np.zeros(m, int)

    def draw_batch(i, size):
        """Literal partial Fisher-Yates over model i's unobserved examples, in index order."""
        pool = list(np.flatnonzero(~mask[i] & avail[i]))
        key_i = sampling.draw_key(examples_key, i, n_obs[i])
        choices = np.asarray(sampling.fisher_yates_choices(key_i, len(pool), B))
        for k in range(size):
            j = k + int(choices[k])
            pool[k], pool[j] = pool[j], pool[k]
        return np.array(pool[:size], dtype=int)

    n0 = config.init_cells_per_model
    for i in range(m):
        order_i = []
        for _ in range(config.init_batches):
            batch = draw_batch(i, B)
            mask[i, batch] = True
            n_obs[i] += B
            order_i.extend(batch)
        if C:
            raw = S[i, order_i]
            cs_take(i, [(raw, np.zeros(n0), np.ones(n0))] * C, raw, 0, 0.0)
    obs_sum = np.array([S[i, mask[i]].sum() for i in range(m)])
    U = np.zeros((m, V.shape[1]))

    def observed_mask():
        return mask.copy()

    def prediction_sums():
        mask = observed_mask()
        P = _sigmoid(U @ V.T) * (~mask & avail)
        return P.sum(1), (P * P).sum(1)

    F = np.zeros(m)
    Phi = np.zeros(m)
    if uses_pred:
        U = _adam_refit(U, V, S, observed_mask(), config.init_refit_epochs, init_lr, float(params.init_refit_l2))
        F, Phi = prediction_sums()

    # estimator state
    n_pulls = np.ones(m, int)
    theta_sum = obs_sum / n0            # PULSE: the initial sample mean is the first theta
    z_sum = np.zeros(m)
    n_z = np.zeros(m, int)
    naive_mu = obs_sum / n0

    def estimates():
        if method == "ucbe":
            mu = obs_sum / n_obs
        elif method == "pulse":
            mu = theta_sum / n_pulls
        else:
            mu = naive_mu.copy()
        return np.where(n_obs >= N, obs_sum / N, mu)

    def bounds():
        if not C:
            return np.full(m, np.nan), np.full(m, np.nan)
        exact = n_obs >= N
        return np.where(exact, obs_sum / N, cs_low), np.where(exact, obs_sum / N, cs_high)

    certified = {"spent": -1, "model": -1}

    def check_certificate():
        lo, hi = bounds()
        if not C or certified["spent"] >= 0:
            return
        h = int(np.argmax(lo))
        rival = np.max(np.where(np.arange(m) == h, -np.inf, hi))
        if lo[h] > rival:
            certified.update(spent=spent, model=h)

    # successive halving's bookkeeping (Karnin et al. 2013, as documented in pulse_jax/rules/successive_halving.py)
    halving = {"survivors": np.ones(m, bool), "phase": 0, "pulls": np.zeros(m, int), "used": 0,
               "total": config.bandit_budget // B, "phases": max(1, int(np.ceil(np.log2(m))))}

    def halving_target():
        k = max(int(halving["survivors"].sum()), 1)
        if halving["phase"] >= halving["phases"] - 1:
            return (halving["total"] - halving["used"]) // k
        return halving["total"] // (k * halving["phases"])

    def recommend(u):
        eligible = halving["survivors"] if plugins.rule.name == "successive_halving" else np.ones(m, bool)
        return _random_argmax(u, np.where(eligible, estimates(), -np.inf), model_order)

    spent = config.init_cells
    best = recommend(uniforms[0, 1])
    check_certificate()
    rec = {"best": [], "spent": [], "chosen": [], "lam": [], "estimates": [], "low": [], "high": []}
    for t in range(1, config.n_steps + 1):
        active = n_obs < N
        index = np.where(active, estimates() + np.sqrt(a / n_obs), -np.inf)
        i = _random_argmax(uniforms[t, 0], index, model_order)
        if plugins.rule.name == "lucb":
            lo, hi = bounds()
            leader = _random_argmax(uniforms[t, 2], estimates(), model_order)
            challenger = _random_argmax(uniforms[t, 3], np.where(np.arange(m) == leader, -np.inf, hi), model_order)
            width = hi - lo
            pick = leader if active[leader] and (not active[challenger] or width[leader] >= width[challenger]) \
                else challenger
            i = pick if active[pick] else i
        if plugins.rule.name.startswith("lucb_top_"):
            lo, hi = bounds()
            k = dict(plugins.rule.settings)["k"]
            member = np.zeros(m, bool)
            member[np.argsort(-estimates(), kind="stable")[:k]] = True     # lax.top_k: ties to the lower index
            weakest = _random_argmax(uniforms[t, 2], np.where(member, -lo, -np.inf), model_order)
            strongest = _random_argmax(uniforms[t, 3], np.where(member, -np.inf, hi), model_order)
            width = hi - lo
            pick = weakest if active[weakest] and (not active[strongest] or width[weakest] >= width[strongest]) \
                else strongest
            i = pick if active[pick] else i
        if plugins.rule.name == "top_two":
            beta = float(params.rule.leader_fraction)
            est = estimates()
            leader = _random_argmax(uniforms[t, 2], est, model_order)
            if dict(plugins.rule.settings)["challenger"] == "interval":
                lo, hi = bounds()
                cost = lo[leader] - hi   # how far j's upper bound lies below the leader's lower bound
            else:
                nn = np.maximum(n_obs, 1).astype(np.float64)
                cost = np.maximum(est[leader] - est, 0.0) / np.sqrt(1 / nn[leader] + 1 / nn)
            cost[leader] = np.inf
            challenger = _random_argmax(uniforms[t, 3], -cost, model_order)
            first, second = (leader, challenger) if uniforms[t, 4] < beta else (challenger, leader)
            pick = first if active[first] else second
            i = pick if active[pick] else i
        if plugins.rule.name == "successive_halving":
            sv = halving["survivors"]
            done = ~sv | (n_obs >= N) | (halving["pulls"] >= halving_target())
            if done.all() and sv.sum() > 1:
                values = np.where(sv, estimates(), -np.inf)[model_order]
                keep = model_order[np.argsort(-values, kind="stable")[:(int(sv.sum()) + 1) // 2]]
                halving["survivors"] = np.isin(np.arange(m), keep)
                halving["used"] += int(halving["pulls"].sum())
                halving["pulls"][:] = 0
                halving["phase"] += 1
                best = recommend(uniforms[t, 1])
            want = halving["survivors"] & active & (halving["pulls"] < halving_target())
            i = _random_argmax(uniforms[t, 0], np.where(want, -halving["pulls"], -10**9), model_order) \
                if want.any() else -1
        size = max(0, min(B, N[i] - n_obs[i], T - spent)) if active.any() and i >= 0 else 0
        if plugins.stop.name == "certified" and certified["spent"] >= 0:
            size = 0
        lam = np.nan
        if size > 0:
            if uses_pred and tau > 0 and t % tau == 0:
                U = _adam_refit(U, V, S, observed_mask(), config.refit_epochs, refit_lr, float(params.refit_l2),
                                carried=carried if config.carry_refit_state else None)
                F, Phi = prediction_sums()
                if method == "naive":
                    naive_mu = (obs_sum + F) / N
            batch = draw_batch(i, size)
            mask[i, batch] = True
            s = S[i, batch]
            f = _sigmoid(V[batch] @ U[i]) if uses_pred else np.zeros(size)
            n_unobs = N[i] - n_obs[i]
            if method == "ucbe":
                cs_take(i, [(s, np.zeros(size), np.ones(size))], s, n_obs[i], obs_sum[i])
            if method == "pulse":
                zbar = z_sum[i] / n_z[i] if n_z[i] else 0.0
                lam = float(np.clip(1 - F[i] * zbar / (n_unobs * Phi[i]), 0, 1)) if Phi[i] > 0 else 1.0
                fbar = (F[i] - (np.cumsum(f) - f)) / (n_unobs - np.arange(size))
                cs_take(i, [(s, np.zeros(size), np.ones(size)),
                            (s - lam * f + lam * fbar, lam * (fbar - 1), np.full(size, 1 + lam))],
                        s, n_obs[i], obs_sum[i])
                z = (n_unobs / size) * (s.sum() - lam * f.sum())
                theta_sum[i] += (obs_sum[i] + lam * F[i] + z) / N[i]
                z_sum[i] += z
                n_z[i] += 1
            if method == "naive":
                naive_mu[i] = (obs_sum[i] + s.sum() + F[i] - f.sum()) / N[i]
            n_obs[i] += size
            n_pulls[i] += 1
            obs_sum[i] += s.sum()
            F[i] -= f.sum()
            Phi[i] -= (f * f).sum()
            spent += size
            halving["pulls"][i] += 1
            best = recommend(uniforms[t, 1])
            check_certificate()
        lo, hi = bounds()
        rec["low"].append(lo)
        rec["high"].append(hi)
        rec["best"].append(best)
        rec["spent"].append(spent)
        rec["chosen"].append(i if size > 0 else -1)
        rec.setdefault("phase", []).append(halving["phase"])
        rec["lam"].append(lam)
        rec["estimates"].append(estimates())
    out = {k: np.asarray(v) for k, v in rec.items()}
    out.update(final_estimates=estimates(), n_obs=n_obs.copy(), n_pulls=n_pulls.copy(),
               certified_spent=certified["spent"], certified_model=certified["model"])
    return out


def assert_engine_agrees(config, plugins, scores, V, params, seeds=(0, 1)) -> None:
    """The jitted engine against :func:`reference_run` on the same keys: every choice, recommendation,
    count and certificate exactly; estimates, lambda and bounds within 2e-5 (a float32 engine against a
    float64 loop: estimates are means of O(1) terms, the sequences float32 sums of O(n) terms, refits
    5-20 Adam steps; 2e-5 is far below any gap that could flip a choice on the test problems)."""
    plugins = engine.as_plugins(plugins)
    run = jax.jit(engine.make_run(config, plugins))
    for seed in seeds:
        key = jax.random.PRNGKey(seed)
        out = run(key, scores, V, params)
        ref = reference_run(scores, V, config, plugins, key, params)
        for field in ("chosen", "best", "spent"):
            np.testing.assert_array_equal(np.asarray(getattr(out.steps, field)), ref[field])
        np.testing.assert_array_equal(np.asarray(out.n_obs), ref["n_obs"])
        np.testing.assert_array_equal(np.asarray(out.n_pulls), ref["n_pulls"])
        np.testing.assert_allclose(np.asarray(out.steps.estimates), ref["estimates"], atol=2e-5)
        if plugins.estimator.name == "pulse":
            np.testing.assert_allclose(np.asarray(out.steps.info.lam), ref["lam"], atol=2e-5)
        np.testing.assert_allclose(np.asarray(out.steps.low), ref["low"], atol=2e-5)
        np.testing.assert_allclose(np.asarray(out.steps.high), ref["high"], atol=2e-5)
        assert int(out.certified.spent) == ref["certified_spent"]
        assert int(out.certified.model) == ref["certified_model"]
