"""Fixed-confidence runs stop computing once a whole batch has stopped, with every result equal to the scan's."""

import jax
import numpy as np
import pytest
from conftest import same_floats, tiny_problem

import pulse_jax as pj
from pulse_jax import engine


def _stacked(reps, **kw):
    return jax.tree_util.tree_map(lambda v: np.full(reps, v, np.float32), pj.BanditParams(**kw))


@pytest.mark.parametrize("method, rule", [("ucbe", "lucb"), ("pulse", "lucb"), ("pulse", "successive_halving"),
                                          ("pulse", "top_two_interval")])
def test_blocked_run_equals_the_scan_on_every_repetition(method, rule):
    """Choices, recommendations, spent cells, certification, estimates, bounds and the estimator's info:
    the blocked while-loop against the plain scan on the same keys, with a block (8 steps) that does not
    divide the step count. Delta 0.5 so that most repetitions certify well before the budget."""
    scores, _, V = tiny_problem(seed=4, m=5, n=60)
    rule = pj.top_two(challenger="interval") if rule == "top_two_interval" else rule
    config = pj.BanditConfig(n_models=5, n_examples=60, budget=5 * 60, batch_size=4, refit_every=5,
                             init_refit_epochs=10, refit_epochs=3, record_estimates=True)
    plugins = pj.Plugins(method, rule, "certified")
    reps = 12
    keys = jax.random.split(jax.random.PRNGKey(7), reps)
    params = _stacked(reps, delta=0.5)
    scan = jax.jit(jax.vmap(engine.make_run(config, plugins), in_axes=(0, None, None, 0)))(keys, scores, V, params)
    blocked = jax.jit(engine.make_batched_run(config, plugins, block=8))(keys, scores, V, params)
    certified = np.asarray(scan.certified.spent)
    if rule != "successive_halving":   # (its schedule is not built to certify; equality is what counts)
        assert (certified >= 0).mean() >= 0.5 and certified.max() < config.budget   # the case the loop is for
    for a, b in zip(jax.tree_util.tree_leaves(scan), jax.tree_util.tree_leaves(blocked)):
        same_floats(a, b, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(scan.steps.chosen), np.asarray(blocked.steps.chosen))
    np.testing.assert_array_equal(certified, np.asarray(blocked.certified.spent))


@pytest.mark.integration   # two compilations with a host callback (~16 s): the second test command; the default
# run keeps the blocked path's equality with the scan (test_blocked_run_equals_the_scan_on_every_repetition)
def test_simulate_certified_stops_computing_and_agrees(monkeypatch):
    """``simulate(stop="certified")`` takes the blocked path: the steps it computes end with the block in
    which the batch's last repetition stopped (each computed step reports its t through a callback), and
    its certification equals that of the run that spends the whole budget."""
    scores, _, V = tiny_problem(seed=5, m=5, n=200)
    config = pj.BanditConfig(n_models=5, n_examples=200, budget=5 * 200, batch_size=4)
    seen = set()
    original = engine.drivers.build_kernel

    def reporting_kernel(config, plugins):
        kernel = original(config, plugins)

        def step(episode, state, params, t, *rest, **keywords):
            jax.debug.callback(lambda t: seen.add(int(t)), t)
            return kernel.step(episode, state, params, t, *rest, **keywords)
        return kernel._replace(step=step)

    monkeypatch.setattr(engine.drivers, "build_kernel", reporting_kernel)
    monkeypatch.setattr(engine.drivers, "STOP_BLOCK_STEPS", 16)
    pj.simulate.__globals__["compiled_runner"].cache_clear()
    stopped = pj.simulate(scores, config, pj.Plugins("ucbe", "lucb", "certified"), reps=16, seed=3, chunk_size=16,
                          params=pj.BanditParams(delta=0.5))
    computed = max(seen)
    pj.simulate.__globals__["compiled_runner"].cache_clear()
    full = pj.simulate(scores, config, pj.Plugins("ucbe", "lucb"), reps=16, seed=3, params=pj.BanditParams(delta=0.5))
    np.testing.assert_array_equal(stopped.certified_spent, full.certified_spent)
    np.testing.assert_array_equal(stopped.certified_model, full.certified_model)
    assert (stopped.certified_spent >= 0).all()
    last_step = int(np.max(np.argmax(stopped.spent == stopped.spent[:, -1:], axis=1)))   # last step that spent
    assert computed < -(-(last_step + 2) // 16) * 16 <= config.n_steps   # the block of the stop is the last
    np.testing.assert_array_equal(stopped.spent[:, -1], stopped.certified_spent)


def test_each_confidence_sequence_is_kept_and_covers_on_its_own():
    """PULSE runs two sequences per model (raw scores, AIPW proxies): both are returned, their running
    intersection is exactly the stored interval, and each alone covers every model's mean at every look
    in at least 1 - delta of 200 repetitions (each is built at delta / 2; at delta = 0.2 a sequence whose
    misses were not controlled would fail this with 200 repetitions)."""
    scores, train, V = tiny_problem(seed=9, m=5, n=80)
    config = pj.BanditConfig(n_models=5, n_examples=80, budget=5 * 40, batch_size=4, refit_every=5)
    res = pj.simulate(scores, config, "pulse", V=V, reps=200, seed=1, params=pj.BanditParams(delta=0.2))
    assert res.cs_seq_low.shape == (200, 5, 2)
    # The stored interval is the sequences' running intersection, except for a model evaluated on every
    # example, whose interval is its exact mean (what certification uses).
    exhausted = res.n_obs >= 80
    exact = np.broadcast_to(scores.mean(1), res.cs_low.shape)
    assert exhausted.any() and not exhausted.all()
    np.testing.assert_array_equal(res.cs_seq_low.max(axis=2)[~exhausted], res.cs_low[~exhausted])
    np.testing.assert_array_equal(res.cs_seq_high.min(axis=2)[~exhausted], res.cs_high[~exhausted])
    np.testing.assert_allclose(res.cs_low[exhausted], exact[exhausted], atol=1e-6)
    np.testing.assert_allclose(res.cs_high[exhausted], exact[exhausted], atol=1e-6)
    covers = res.cs_sequence_covers().all(axis=1)          # (R, C): every model, every look
    assert (covers.mean(axis=0) >= 0.8).all(), covers.mean(axis=0)
    ucbe = pj.simulate(scores, config, "ucbe", reps=4, seed=1)
    assert ucbe.cs_seq_low.shape == (4, 5, 1)


@pytest.mark.parametrize("stop", ["certified", "budget"])
def test_summary_only_runs_keep_one_record_and_the_same_results(stop):
    """``record_steps=False``: the records hold the final state alone (memory independent of the budget),
    every summary equals the recorded run's, and per-budget curves are refused rather than guessed."""
    import dataclasses

    from pulse_jax.errors import PulseInputError

    scores, _, V = tiny_problem(seed=6, m=5, n=120)
    config = pj.BanditConfig(n_models=5, n_examples=120, budget=5 * 120, batch_size=4, refit_every=5)
    plugins = pj.Plugins("pulse", "lucb", stop)
    full = pj.simulate(scores, config, plugins, V=V, reps=8, seed=2, params=pj.BanditParams(delta=0.5))
    brief = pj.simulate(scores, dataclasses.replace(config, record_steps=False), plugins, V=V, reps=8, seed=2,
                        params=pj.BanditParams(delta=0.5))
    assert brief.best.shape == (8, 2) and brief.chosen.shape == (8, 1)
    np.testing.assert_array_equal(brief.best[:, -1], full.best[:, -1])
    np.testing.assert_array_equal(brief.spent[:, -1], full.spent[:, -1])
    np.testing.assert_array_equal(brief.certified_spent, full.certified_spent)
    np.testing.assert_array_equal(brief.n_obs, full.n_obs)
    same_floats(brief.estimates, full.estimates, atol=1e-6)
    same_floats(brief.cs_low, full.cs_low, atol=1e-6)
    for key, value in full.certification().items():
        np.testing.assert_array_equal(brief.certification()[key], value)
    with pytest.raises(PulseInputError, match="kept only its summary"):
        brief.accuracy_at_budget([1000])
