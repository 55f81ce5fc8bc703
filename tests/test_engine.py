"""The JAX engine against the NumPy reference loop, edge cases and determinism."""
import functools

import jax
import numpy as np
import optax
import pytest
from conftest import tiny_problem
from reference import assert_engine_agrees

import pulse_jax as pj
from pulse_jax import engine
from pulse_jax.stats import factorization, ties
from pulse_jax.simulation import simulate
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError
from pulse_jax.engine.params import BanditParams

METHODS = ["ucbe", "pulse", "naive"]
INIT_LR, REFIT_LR = 0.01, 0.1


def _config(m, n, budget, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("refit_every", 5)
    return BanditConfig(n_models=m, n_examples=n, budget=budget, record_estimates=True, init_refit_epochs=20,
                        refit_epochs=5, **kw)


def _params(**kw):
    return BanditParams(init_refit_lr=INIT_LR, refit_lr=REFIT_LR, **kw)


CASES = {
    # name: (m, n, budget offset past init, batch, refit_every)
    "plain": (6, 40, 100, 4, 5),
    "exhausts-models-partial-batches": (5, 46, 190, 8, 3),   # (46 - 8) % 8 != 0, budget = every cell
    "budget-not-multiple-of-batch": (4, 60, 37, 5, 4),
}


RULES = {   # (rule, stop when certified, delta): the paper's rule, and LUCB stopping at a loose level
    "ucbe-rule": ("ucbe", False, 0.05),
    "lucb-stop": ("lucb", True, 0.5),
}


# Every method and case under the paper's rule; LUCB with certified stopping on the case that
# certifies within its budget (exhausts-...), for the two methods that have an interval.
REFERENCE_RUNS = ([(method, case, "ucbe-rule") for method in METHODS for case in CASES]
                  + [(method, "exhausts-models-partial-batches", "lucb-stop") for method in ("ucbe", "pulse")])


@pytest.mark.parametrize("method,case,rule", REFERENCE_RUNS)
def test_engine_matches_numpy_reference_step_for_step(method, case, rule):
    m, n, extra, batch, tau = CASES[case]
    rule_name, stop, delta = RULES[rule]
    scores, _, V = tiny_problem(seed=list(CASES).index(case), m=m, n=n)
    config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau)
    params = _params(delta=delta)
    assert_engine_agrees(config, pj.Plugins(method, rule_name, "certified" if stop else "budget"), scores, V, params)


@pytest.mark.parametrize("field", ["record_steps", "carry_refit_state"])
def test_config_switches_must_be_booleans(field):
    with pytest.raises(PulseInputError, match=f"BanditConfig.{field} must be True or False, got 1"):
        BanditConfig(n_models=3, n_examples=10, budget=20, batch_size=2, **{field: 1})


@pytest.mark.parametrize("method,case", [("pulse", "plain"), ("naive", "exhausts-models-partial-batches")])
def test_carried_refit_state_matches_numpy_reference_step_for_step(method, case):
    """``carry_refit_state``: the periodic refits continue one Adam run (moments and step count kept
    from refit to refit), as the NumPy loop does with its own Adam; the fresh-Adam runs above would
    differ from it after the second refit, so this fails if the state is dropped or reset."""
    m, n, extra, batch, tau = CASES[case]
    scores, _, V = tiny_problem(seed=list(CASES).index(case), m=m, n=n)
    config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau, carry_refit_state=True)
    assert_engine_agrees(config, method, scores, V, _params())
    fresh = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau)
    key = jax.random.PRNGKey(0)
    carried_run, fresh_run = (jax.jit(engine.make_run(c, method))(key, scores, V, _params()) for c in (config, fresh))
    assert not np.allclose(np.asarray(carried_run.steps.estimates), np.asarray(fresh_run.steps.estimates), atol=1e-4)


@pytest.mark.parametrize("method,case", [("pulse", "plain"), ("naive", "exhausts-models-partial-batches"),
                                         ("pulse", "budget-not-multiple-of-batch")])
def test_phased_scan_matches_numpy_reference_step_for_step(method, case, monkeypatch):
    """The scan over refit phases (accelerators' default) against the NumPy loop on a CPU: with its
    last phase padded by no-op steps ("plain", "budget-...") and filling whole phases ("exhausts-...")."""
    monkeypatch.setattr(engine.drivers, "PHASED_BACKENDS", (jax.default_backend(),))
    m, n, extra, batch, tau = CASES[case]
    scores, _, V = tiny_problem(seed=list(CASES).index(case), m=m, n=n)
    config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau)
    assert_engine_agrees(config, method, scores, V, _params())


# 18 programs per method (31 s of a cold default run for PULSE alone): with the integration tests. The
# default run checks the phased scan against the NumPy loop on three cases (the test above), as it
# checks the step scan (test_engine_matches_numpy_reference_step_for_step).
@pytest.mark.integration
@pytest.mark.parametrize("method", ["pulse", "naive", "pulse_hedged"])
def test_phased_scan_equals_the_step_scan(method, monkeypatch):
    """Phases and steps are two loop structures over the same kernel step in the same order: every
    integer (choices, counts, certification) of every record, the final state's results, a followed
    path and a summary-only run are equal exactly, and every float within 1e-5.

    Why not bit for bit: the phased program runs each phase's first step (the one that may refit)
    outside the phase's inner loop, so XLA fuses that step's arithmetic in another context and may
    contract a multiply-add differently, and the next refits carry that last-bit difference on
    (measured on this CPU at the suite's compile settings: at most 2.0e-6, in 1 of 174 values of one
    case; 1.2e-7 at XLA's default emitters). 1e-5 is 5x that: far below what one cell taken on another
    path moves an estimate (1 / n >= 1 / 60), and any change of order would also change a choice."""
    m, n, extra, batch, tau = CASES["exhausts-models-partial-batches"]
    scores, _, V = tiny_problem(seed=4, m=m, n=n)
    keys = jax.random.split(jax.random.PRNGKey(5), 6)

    def runs():
        out = {}
        for record_steps in (True, False):
            config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau, record_steps=record_steps,
                             cs_grid=16 if method == "pulse_hedged" else 0)
            out[record_steps] = jax.jit(jax.vmap(engine.make_run(config, method), in_axes=(0, None, None, None)))(
                keys, scores, V, _params())
        config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau)
        path = np.where(np.arange(config.n_steps) % 3 == 2, -1, np.arange(config.n_steps) % m).astype(np.int32)
        out["follow"] = jax.jit(engine.make_run(config, method, follow=True))(keys[0], scores, V, _params(), path)
        return out

    steps = runs()
    monkeypatch.setattr(engine.drivers, "PHASED_BACKENDS", (jax.default_backend(),))
    phases = runs()
    for name in steps:
        for a, b in zip(jax.tree_util.tree_leaves(steps[name]), jax.tree_util.tree_leaves(phases[name])):
            a, b = np.asarray(a), np.asarray(b)
            if not np.issubdtype(a.dtype, np.floating):
                np.testing.assert_array_equal(a, b, err_msg=f"{method}, {name}")
            else:
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=f"{method}, {name}")


def test_random_argmax_is_uniform_over_ties_exactly():
    values = jax.numpy.array([0.2, 0.7, 0.1, 0.7, 0.7, 0.5])
    order = jax.numpy.array([3, 0, 5, 1, 2, 4])
    picks = [int(ties.random_argmax((k + 0.5) / 30, values, order)) for k in range(30)]
    assert sorted(set(picks)) == [1, 3, 4]
    assert all(picks.count(i) == 10 for i in (1, 3, 4))


def test_kth_true_and_random_argmax_agree_with_plain_numpy_on_every_rank():
    """The blocked search for the k-th true entry, against NumPy's cumulative count: sizes around
    the block width and the engine's 1,000 models, sparse and dense masks, every rank k (and
    -1, the no-tie case of an all-NaN row). ``random_argmax`` on 1,000 models with ties in
    several blocks equals the reference implementation's for every u."""
    from reference import _random_argmax

    rng = np.random.default_rng(21)
    search = jax.jit(ties.kth_true)
    for n in (1, 5, 31, 32, 33, 64, 1000):
        for density in (0.02, 0.5, 1.0):
            mask = rng.random(n) < density
            ks = np.arange(-1, int(mask.sum()))
            got = np.asarray(jax.vmap(search, in_axes=(None, 0))(jax.numpy.asarray(mask), jax.numpy.asarray(ks)))
            want = [int(np.sum(np.cumsum(mask) <= k)) for k in ks]
            assert got.tolist() == want, (n, density)
    values = rng.integers(0, 5, 1000).astype(np.float32)          # about 200 models tied for the best
    order = rng.permutation(1000).astype(np.int32)
    us = (np.arange(400) + 0.5) / 400
    picks = jax.jit(jax.vmap(ties.random_argmax, in_axes=(0, None, None)))(
        jax.numpy.asarray(us, jax.numpy.float32), jax.numpy.asarray(values), jax.numpy.asarray(order))
    assert np.asarray(picks).tolist() == [_random_argmax(np.float32(u), values, order) for u in us]


def test_ties_between_identical_best_models_are_broken_at_random():
    # Two identical best rows; lowest-index tie-breaking would always answer row 0.
    rng = np.random.default_rng(0)
    row = (rng.random(50) < 0.7).astype(np.float32)
    scores = np.stack([row, row, (rng.random(50) < 0.3).astype(np.float32)])
    config = BanditConfig(n_models=3, n_examples=50, budget=3 * 5 + 40, batch_size=5)
    res = simulate(scores, config, "ucbe", reps=400, seed=1)
    final = res.best[:, -1]
    assert set(final) <= {0, 1}
    assert 0.4 < (final == 0).mean() < 0.6   # 400 fair coin flips: 5 SE either side


def test_two_models():
    scores, _, V = tiny_problem(m=2, n=30)
    config = BanditConfig(n_models=2, n_examples=30, budget=2 * 4 + 20, batch_size=4, refit_every=2)
    for method in METHODS:
        res = simulate(scores, config, method, V=V, reps=5)
        assert res.best.shape == (5, config.n_steps + 1)
        assert (res.spent[:, -1] == config.budget).all()


def test_exhausted_models_are_exact_and_never_pulled_again():
    m, n, batch = 4, 22, 8
    scores, _, V = tiny_problem(m=m, n=n)
    with pytest.warns(UserWarning, match="clipped"):   # budget beyond the matrix: clipped, never spent
        config = BanditConfig(n_models=m, n_examples=n, budget=m * n + 50, batch_size=batch, refit_every=3)
    for method in METHODS:
        res = simulate(scores, config, method, V=V, reps=3)
        assert (res.n_obs == n).all()                      # everything observed
        assert (res.spent[:, -1] == m * n).all()           # the excess budget is left unspent
        np.testing.assert_allclose(res.estimates, np.broadcast_to(res.true_means, res.estimates.shape), atol=1e-6)
        assert (res.radius == 0).all()
        for r in range(3):
            chosen = res.chosen[r]
            for i in range(m):
                pulls = np.nonzero(chosen == i)[0]
                # initial batch of 8 + 8 + a partial batch of 6 = 22: exactly two bandit pulls
                assert len(pulls) == 2


def test_last_partial_batch_spends_the_budget_exactly():
    scores, _, V = tiny_problem(m=3, n=100)
    config = BanditConfig(n_models=3, n_examples=100, budget=3 * 4 + 10, batch_size=4)
    res = simulate(scores, config, "pulse", V=V, reps=4)
    assert config.n_steps == 3
    assert (res.spent[:, -1] == config.budget).all()
    assert sorted(np.diff(res.spent[0])) == [2, 4, 4]


def test_budget_exactly_at_initialization():
    scores, _, V = tiny_problem(m=5, n=40)
    config = BanditConfig(n_models=5, n_examples=40, budget=5 * 4, batch_size=4)
    assert config.n_steps == 0
    for method in METHODS:
        res = simulate(scores, config, method, V=V, reps=3)
        assert res.best.shape == (3, 1)
        assert (res.n_obs == 4).all()
        assert (res.spent == 20).all()


SEEDED = tiny_problem(m=6, n=50)
SEEDED_CONFIG = BanditConfig(n_models=6, n_examples=50, budget=6 * 4 + 80, batch_size=4, refit_every=4)


#: The tests that read `_seeded_run` run on one pytest-xdist worker, so its programs compile once.
SEEDED_GROUP = pytest.mark.xdist_group("engine_seeded")


@functools.lru_cache(maxsize=None)
def _seeded_run(method, seed=11, chunk_size=7):
    """7 repetitions of the 6 x 50 problem (shared by the determinism tests: one compilation per chunk size)."""
    scores, _, V = SEEDED
    return simulate(scores, SEEDED_CONFIG, method, V=V, reps=7, seed=seed, chunk_size=chunk_size)


@SEEDED_GROUP
def test_same_seed_same_result_and_chunking_does_not_matter():
    for method in METHODS:
        # one chunk, a repeat, and for PULSE three padded chunks of 3 (chunking splits and pads the
        # repetitions before any estimator sees them: another estimator's chunks add a compile, not a case)
        first = _seeded_run(method)
        scores, _, V = SEEDED
        chunked = (_seeded_run(method, chunk_size=3),) if method == "pulse" else ()
        for other in chunked + (simulate(scores, SEEDED_CONFIG, method, V=V, reps=7, seed=11, chunk_size=7),):
            for field in ("best", "spent", "chosen", "n_obs", "n_pulls", "certified_spent"):
                np.testing.assert_array_equal(getattr(first, field), getattr(other, field))
            np.testing.assert_allclose(first.estimates, other.estimates, rtol=0, atol=1e-6)
        different = _seeded_run(method, seed=12)
        assert not np.array_equal(different.chosen, first.chosen)


@SEEDED_GROUP
def test_methods_share_initial_draws():
    """Common random numbers: with one seed, every method sees the same initial batches."""
    first = {m: _seeded_run(m) for m in METHODS}
    # After initialization UCB-E and PULSE both estimate with the same sample means.
    np.testing.assert_array_equal(first["ucbe"].best[:, 0], first["pulse"].best[:, 0])
    np.testing.assert_array_equal(first["ucbe"].chosen[:, 0], first["pulse"].chosen[:, 0])


@SEEDED_GROUP
def test_following_a_runs_choices_repeats_it_and_follows_any_path():
    """``simulate(..., follow=chosen)`` pulls the given models and computes everything else as usual:
    following a run's own choices (same seed) repeats that run exactly; following another method's
    choices walks that path (so two backends can be compared on one sample path)."""
    scores, _, V = SEEDED
    for method in METHODS:
        free = _seeded_run(method)
        again = simulate(scores, SEEDED_CONFIG, method, V=V, reps=7, seed=11, chunk_size=7, follow=free.chosen)
        for field in ("best", "spent", "chosen", "n_obs", "n_pulls", "certified_spent"):
            np.testing.assert_array_equal(getattr(again, field), getattr(free, field))
        # Same arithmetic, but a different program (the choice is an input): equal to float32 rounding.
        np.testing.assert_allclose(again.estimates, free.estimates, rtol=0, atol=1e-6)
    path = _seeded_run("ucbe").chosen
    led = simulate(scores, SEEDED_CONFIG, "pulse", V=V, reps=7, seed=11, chunk_size=7, follow=path)
    np.testing.assert_array_equal(led.chosen, path)
    assert not np.array_equal(_seeded_run("pulse").chosen, path)   # PULSE would have gone elsewhere
    with pytest.raises(PulseInputError, match=r"follow must have shape \(reps, n_steps\) = \(7, 22\), got \(7, 5\)"):
        simulate(scores, SEEDED_CONFIG, "ucbe", reps=7, follow=path[:, :5])
    bad = path.copy()
    bad[2, 3] = 6
    with pytest.raises(PulseInputError, match=r"follow\[2, 3\] = 6 is not a model index in \[0, 6\)"):
        simulate(scores, SEEDED_CONFIG, "ucbe", reps=7, follow=bad)


def test_following_a_run_repeats_it_and_follows_any_path():
    m, n, extra, batch, tau = CASES["plain"]
    scores, _, V = tiny_problem(seed=0, m=m, n=n)
    config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=tau)
    key = jax.random.PRNGKey(3)
    free = jax.jit(engine.make_run(config, "pulse"))(key, scores, V, _params())
    follow = jax.jit(engine.make_run(config, "pulse", follow=True))
    again = follow(key, scores, V, _params(), free.steps.chosen)
    np.testing.assert_array_equal(np.asarray(again.steps.chosen), np.asarray(free.steps.chosen))
    np.testing.assert_allclose(np.asarray(again.steps.info.lam), np.asarray(free.steps.info.lam), atol=1e-6)
    np.testing.assert_allclose(np.asarray(again.steps.estimates), np.asarray(free.steps.estimates), atol=1e-6)
    # A path with skipped steps (-1) and a model pulled over and over: the record shows exactly it.
    path = np.where(np.arange(config.n_steps) % 4 == 3, -1, np.arange(config.n_steps) % m).astype(np.int32)
    led = follow(key, scores, V, _params(), path)
    np.testing.assert_array_equal(np.asarray(led.steps.chosen), path)
    assert int(led.steps.spent[-1]) == config.init_cells + batch * int((path >= 0).sum())


def _blocks_problem(seed, m, n, r, L, K):
    """``(rng, V, U0, first, log)``: random embeddings and start, one initial block per model, and
    a log of ``K`` blocks (about 10% of its cells invalid)."""
    rng = np.random.default_rng(seed)
    jnp = jax.numpy
    V = jnp.asarray(rng.normal(0, 1, (n, r)), jnp.float32)
    U0 = jnp.asarray(rng.normal(0, 0.1, (m, r)), jnp.float32)
    first = factorization.CellBlocks(jnp.arange(m, dtype=jnp.int32), jnp.asarray(rng.integers(0, n, (m, L)), jnp.int32),
                                     jnp.asarray(rng.random((m, L)), jnp.float32), jnp.ones((m, L), bool))
    log = factorization.CellBlocks(jnp.asarray(rng.integers(0, m, K), jnp.int32),
                                   jnp.asarray(rng.integers(0, n, (K, L)), jnp.int32),
                                   jnp.asarray(rng.random((K, L)), jnp.float32), jnp.asarray(rng.random((K, L)) < 0.9))
    return rng, V, U0, first, log


def test_refit_visits_only_the_filled_prefix_of_the_log():
    """A refit told that only ``used`` slots of the log are filled (the bandit's pull log at step
    ``used + 1``: later slots are empty, ``valid`` false) visits them chunk by chunk and equals the
    refit on the first ``used`` slots alone; the prediction sums likewise. The empty slots hold
    out-of-range scores, which would show if they leaked in. Covers a prefix ending inside a chunk,
    on a chunk boundary, and an empty one."""
    m, n, r, L, K, chunk = 6, 40, 3, 4, 12, 4
    jnp = jax.numpy
    _, V, U0, first, log = _blocks_problem(11, m, n, r, L, K)
    settings = factorization.adam_settings(15, 0.1, 0.01)
    for used in (7, 8, 0):
        garbage = log._replace(scores=log.scores.at[used:].set(5.0), valid=log.valid.at[used:].set(False))
        prefix = jax.tree_util.tree_map(lambda a: a[:used], log)
        filled = factorization.FilledPrefix(jnp.int32(used), chunk)
        fitted = jax.jit(lambda u, b: factorization.refit_rows_on_blocks(u, V, b, n, settings, filled=filled))(U0, (first, garbage))
        alone = factorization.refit_rows_on_blocks(U0, V, (first, prefix) if used else (first,), n, settings)
        # float32, 15 Adam steps: the chunked sum adds the same terms in another order
        np.testing.assert_allclose(np.asarray(fitted), np.asarray(alone), atol=2e-5)
        sums = factorization.block_prediction_sums(fitted, V, (first, garbage), filled)
        expected = factorization.block_prediction_sums(fitted, V, (first, prefix) if used else (first,))
        np.testing.assert_allclose(np.asarray(sums), np.asarray(expected), atol=1e-5)


def test_refit_in_cache_sized_chunks_equals_the_refit_on_whole_groups(monkeypatch):
    """On a CPU the refit gathers ``V`` rows a cache-sized chunk at a time (``chunk_bytes``); that is
    only a different order of the same sums. Chunks of 2 and 5 blocks (5 leaves a tail of 2 in a
    group of 12), with and without a filled prefix of 9 (whose chunks divide its unit of 4), give the
    whole-group refit and prediction sums to float32 rounding; the dense prediction sums made a
    few rows at a time equal those made at once."""
    m, n, r, L, K = 6, 40, 3, 4, 12
    jnp = jax.numpy
    rng, V, U0, first, log = _blocks_problem(12, m, n, r, L, K)
    settings = factorization.adam_settings(15, 0.1, 0.01)
    per_block = L * r * 4
    log = log._replace(valid=log.valid.at[9:].set(False))     # a filled prefix of 9 blocks: the rest is empty

    def refit(budget, filled):
        monkeypatch.setattr(factorization, "chunk_bytes", lambda platform=None: budget)
        visits = factorization.plan_visits(V, (first, log), filled)
        U = jax.jit(lambda u: factorization.refit_rows_on_blocks(u, V, (first, log), n, settings, filled=filled))(U0)
        return visits, U, factorization.block_prediction_sums(U, V, (first, log), filled)

    for filled in (None, factorization.FilledPrefix(jnp.int32(9), 4)):
        _, whole_U, whole_sums = refit(None, filled)
        for blocks_per_chunk in (2, 5):
            visits, U, sums = refit(blocks_per_chunk * per_block, filled)
            assert all(v.rows is None for v in visits)          # the chunked path really ran
            assert visits[1].chunk == (min(blocks_per_chunk, 4) if filled else blocks_per_chunk)
            np.testing.assert_allclose(np.asarray(U), np.asarray(whole_U), atol=2e-6)   # float32 reordering only
            np.testing.assert_allclose(np.asarray(sums), np.asarray(whole_sums), atol=2e-6)

    # The dense prediction sums, 4 rows at a time (and a tail of 2) against all 6 rows at once.
    missing = jnp.asarray(rng.random((m, n)) < 0.2)
    monkeypatch.setattr(factorization, "chunk_bytes", lambda platform=None: None)
    whole = factorization.prediction_row_sums(U0, V, missing)
    monkeypatch.setattr(factorization, "chunk_bytes", lambda platform=None: 1)
    monkeypatch.setattr(factorization, "CPU_DENSE_BYTES", 4 * n * 4)
    blocked = jax.jit(factorization.prediction_row_sums)(U0, V, missing)
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(whole), rtol=1e-6)
    assert np.asarray(whole).shape == (2, m) and np.all(np.asarray(whole[0]) > 0)

    # Leaving out the observed cells in the same pass (packed bits, as the state keeps them) gives the
    # sums over the unobserved cells, a few rows at a time or all at once: against NumPy in float64.
    from pulse_jax.stats import without_replacement as sampling

    observed = rng.random((m, n)) < 0.3
    words = sampling.pack(jax.numpy.asarray(observed))
    P = 1 / (1 + np.exp(-np.asarray(U0, np.float64) @ np.asarray(V, np.float64).T))
    keep = ~(observed | np.asarray(missing))
    for bytes_per_chunk in (4 * n * 4, None):
        monkeypatch.setattr(factorization, "chunk_bytes", lambda platform=None, b=bytes_per_chunk: b and 1)
        got = jax.jit(factorization.prediction_row_sums)(U0, V, missing, words)
        np.testing.assert_allclose(np.asarray(got[0]), (P * keep).sum(1), rtol=2e-6)
        np.testing.assert_allclose(np.asarray(got[1]), (P * P * keep).sum(1), rtol=2e-6)


def test_refit_on_blocks_equals_the_dense_masked_refit():
    """The engine's observed-cells refit is the dense masked refit (same objective, same Adam),
    computed differently: blocks with unused slots, a model appearing in several blocks."""
    rng = np.random.default_rng(5)
    m, n, r, L = 7, 30, 3, 4
    V = jax.numpy.asarray(rng.normal(0, 1, (n, r)), jax.numpy.float32)
    U0 = jax.numpy.asarray(rng.normal(0, 0.1, (m, r)), jax.numpy.float32)
    S = jax.numpy.asarray(rng.random((m, n)), jax.numpy.float32)          # soft scores
    rows = rng.integers(0, m, 12)
    cols = np.stack([rng.choice(n, L, replace=False) for _ in rows])
    valid = rng.random((12, L)) < 0.8
    # keep each cell once: drop repeats of a (row, col) pair across blocks
    seen = set()
    for k, (i, c) in enumerate(zip(rows, cols)):
        for l, j in enumerate(c):
            if valid[k, l] and (i, j) in seen:
                valid[k, l] = False
            elif valid[k, l]:
                seen.add((i, j))
    mask = np.zeros((m, n), bool)
    for (i, j) in seen:
        mask[i, j] = True
    block = factorization.CellBlocks(jax.numpy.asarray(rows, jax.numpy.int32), jax.numpy.asarray(cols, jax.numpy.int32),
                                     S[rows[:, None], cols], jax.numpy.asarray(valid))
    spreads = []
    A = rng.normal(0, 1, (r, r))
    prior = factorization.RowPrior(jax.numpy.asarray(rng.normal(0, 1, r), jax.numpy.float32),
                                   jax.numpy.asarray(A @ A.T + np.eye(r), jax.numpy.float32))
    # 3.0: the population prior (BanditParams.refit_prior); then a train prior; hand-written gradients
    for shrink, row_prior in ((0.0, None), (3.0, None), (3.0, prior)):
        settings = factorization.adam_settings(25, 0.1, 0.01)._replace(shrink=shrink, row_prior=row_prior)
        dense = factorization.refit_rows(U0, V, S, jax.numpy.asarray(mask), settings)
        sparse = factorization.refit_rows_on_blocks(U0, V, (block,), n, settings)
        # float32, 25 Adam steps of size <= 0.1 from the same start: summation order is the only difference
        np.testing.assert_allclose(np.asarray(sparse), np.asarray(dense), atol=2e-5)
        spreads.append(float(np.mean(np.square(np.asarray(sparse) - np.asarray(sparse).mean(0)))))
    assert spreads[1] < spreads[0]   # the prior pulls the rows together


def test_refit_with_a_row_prior_converges_to_the_map_rows():
    """With weight 1, the refit minimises sum_observed BCE + (1/2) (u - mean)^T P (u - mean) per row:
    long Adam runs reach the rows a float64 Newton solve of that objective gives."""
    rng = np.random.default_rng(8)
    m, n, r = 4, 25, 3
    V = rng.normal(0, 1, (n, r))
    S = (rng.random((m, n)) < 0.6).astype(np.float64)
    mask = rng.random((m, n)) < 0.5
    A = rng.normal(0, 0.5, (r, r))
    mean, P = rng.normal(0, 1, r), A @ A.T + 0.5 * np.eye(r)
    def objective(u, i):
        z = V @ u
        return np.sum(mask[i] * (np.logaddexp(0, z) - S[i] * z)) + 0.5 * (u - mean) @ P @ (u - mean)

    want = np.tile(mean, (m, 1))
    for _ in range(40):   # damped Newton per row (halving until the objective falls), float64
        for i in range(m):
            p = 1 / (1 + np.exp(-(V @ want[i])))
            grad = V.T @ (mask[i] * (p - S[i])) + P @ (want[i] - mean)
            hess = (V * (mask[i] * p * (1 - p))[:, None]).T @ V + P
            move, size = np.linalg.solve(hess, grad), 1.0
            while objective(want[i] - size * move, i) > objective(want[i], i) and size > 1e-6:
                size /= 2
            want[i] -= size * move
    for i in range(m):   # the optimum: zero gradient
        p = 1 / (1 + np.exp(-(V @ want[i])))
        assert np.linalg.norm(V.T @ (mask[i] * (p - S[i])) + P @ (want[i] - mean)) < 1e-9
    f32 = lambda a: jax.numpy.asarray(a, jax.numpy.float32)   # noqa: E731
    settings = factorization.FitSettings(3000, 0.0, optax.adam(0.02), 1.0, factorization.RowPrior(f32(mean), f32(P)))
    block = factorization.CellBlocks(jax.numpy.arange(m, dtype=jax.numpy.int32),        # one block per row
                                     jax.numpy.tile(jax.numpy.arange(n, dtype=jax.numpy.int32), (m, 1)),
                                     f32(S), jax.numpy.asarray(mask))
    got = factorization.refit_rows_on_blocks(f32(np.tile(mean, (m, 1))), f32(V), (block,), n, settings)
    # Adam's last steps are ~lr/10 around the optimum in each coordinate; 5e-3 is well inside the rows' scale.
    np.testing.assert_allclose(np.asarray(got), want, atol=5e-3)
    # the weight is a real knob: 0 leaves only the data term, which lands elsewhere
    free = factorization.refit_rows_on_blocks(f32(np.tile(mean, (m, 1))), f32(V), (block,), n,
                                              settings._replace(shrink=0.0))
    assert np.abs(np.asarray(free) - want).max() > 0.1


@SEEDED_GROUP
def test_init_U_sets_the_first_rows_and_zero_epochs_keep_them_through_refits():
    """``init_U`` with no refit epochs: U stays ``init_U`` through the initial fit and every refit, and
    the ledger's prediction sums are exactly those of ``sigmoid(init_U V^T)`` over each model's
    unobserved cells (the oracle-prediction path of ``benchmarks/paper/paper_scale_configs.py``)."""
    from pulse_jax.stats import without_replacement as sampling
    rng = np.random.default_rng(3)
    m, n, r = 5, 40, 3
    U0, V = rng.normal(0, 1, (m, r)).astype(np.float32), rng.normal(0, 1, (n, r)).astype(np.float32)
    P = 1 / (1 + np.exp(-(U0.astype(np.float64) @ V.T)))
    scores = (rng.random((m, n)) < P).astype(np.float32)
    config = BanditConfig(n_models=m, n_examples=n, budget=m * 4 + 40, batch_size=4, refit_every=2,
                          init_refit_epochs=0, refit_epochs=0)
    kernel = engine.bind(config, "pulse")
    params = engine.resolve_params(BanditParams(), kernel.plugins).as_arrays()
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), jax.numpy.asarray(scores), jax.numpy.asarray(V),
                                          params, engine.Start(init_U=U0))
    step = jax.jit(kernel.step)   # one compiled step, t traced (the refit is its conditional)
    for t in range(1, 6):   # refits at t = 2 and 4
        state, _ = step(episode, state, params, t)
        np.testing.assert_array_equal(np.asarray(state.U), U0)
        unseen = ~np.asarray(sampling.unpack(state.observed, n)).astype(bool)
        np.testing.assert_allclose(state.sums.pred_sum, (P * unseen).sum(1), rtol=0, atol=2e-4)
    # The default start is zeros: passing zeros changes nothing.
    cfg = SEEDED_CONFIG
    zeros = simulate(SEEDED[0], cfg, "pulse", V=SEEDED[2], reps=7, seed=11, chunk_size=7,
                     init_U=np.zeros((cfg.n_models, SEEDED[2].shape[1])))
    np.testing.assert_array_equal(zeros.chosen, _seeded_run("pulse").chosen)
    np.testing.assert_array_equal(zeros.estimates, _seeded_run("pulse").estimates)
    with pytest.raises(PulseInputError, match=r"init_U must have shape \(n_models, rank of V\) = \(6, 3\)"):
        simulate(SEEDED[0], cfg, "pulse", V=SEEDED[2], reps=1, init_U=np.zeros((6, 2)))
    with pytest.raises(PulseInputError, match="init_U: method 'ucbe' makes no predictions"):
        simulate(SEEDED[0], cfg, "ucbe", reps=1, init_U=np.zeros((6, 3)))


def test_a_row_prior_reaches_every_refit_and_bad_priors_are_refused():
    """A confident prior holds every row at its mean through the initial fit and the refits; a prior is refused, in one line, where it would be ignored or is malformed."""
    cfg, (scores, train, V) = SEEDED_CONFIG, SEEDED
    mean = np.array([0.5, -1.0, 2.0], np.float32)
    prior = pj.RowPrior(mean, np.float32(1e6 * np.eye(3)))
    kernel = engine.bind(cfg, "pulse")
    params = engine.resolve_params(BanditParams(refit_prior=1.0, init_refit_lr=0.01, refit_lr=0.01),
                                   kernel.plugins).as_arrays()
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), jax.numpy.asarray(scores), jax.numpy.asarray(V),
                                          params, engine.Start(np.tile(mean, (6, 1)), prior))
    step = jax.jit(kernel.step)
    for t in range(1, 10):   # refits at t = 4 and 8
        state, _ = step(episode, state, params, t)
        # Adam moves a coordinate by about its learning rate per step whatever the gradient's size, so
        # at so stiff an optimum it rattles within ~0.01 of it.
        np.testing.assert_allclose(np.asarray(state.U), np.tile(mean, (6, 1)), atol=0.02)
    # simulate starts from the mean; a learned prior changes the run (it reaches the refits there too)
    U_train = factorization.fit_train_factors(train, rank=3)[0]
    learned = pj.row_prior_from_rows(U_train)
    run = simulate(scores, cfg, "pulse", V=V, reps=7, seed=11, row_prior=learned, params=BanditParams(refit_prior=1.0))
    assert not np.array_equal(run.estimates, _seeded_run("pulse").estimates)
    swept = pj.sweep(scores, cfg, "pulse", {"refit_prior": [1.0]}, reps=7, seed=11, V=V, row_prior=learned)
    np.testing.assert_array_equal(swept.results[0].chosen, run.chosen)   # a sweep passes the prior on as is
    np.testing.assert_allclose(swept.results[0].estimates, run.estimates, rtol=0, atol=1e-6)
    with pytest.raises(PulseInputError, match="params.refit_prior is 0"):
        simulate(scores, cfg, "pulse", V=V, reps=1, row_prior=learned)
    with pytest.raises(PulseInputError, match="row_prior: method 'ucbe' makes no predictions"):
        simulate(scores, cfg, "ucbe", reps=1, row_prior=learned, params=BanditParams(refit_prior=1.0))
    with pytest.raises(PulseInputError, match=r"row_prior.mean must have shape \(rank of V,\) = \(3,\)"):
        simulate(scores, cfg, "pulse", V=V, reps=1, row_prior=pj.RowPrior(np.zeros(2), np.eye(3)),
                 params=BanditParams(refit_prior=1.0))
    with pytest.raises(PulseInputError, match="positive definite"):
        simulate(scores, cfg, "pulse", V=V, reps=1, row_prior=pj.RowPrior(np.zeros(3), -np.eye(3)),
                 params=BanditParams(refit_prior=1.0))
    with pytest.raises(PulseInputError, match="covariance is singular"):
        pj.row_prior_from_rows(np.ones((5, 3)), ridge=0.0)


def test_a_run_without_periodic_refits_compiles_no_conditional():
    """``refit_every`` past the run: no step carries a refit `lax.cond` (on an accelerator a
    conditional costs a host round trip per step): the run has only the conditionals of its
    ``init`` (on a CPU, the choice of how the first fit visits its cells); with periodic refits
    there are more."""
    m, n, extra, batch, tau = CASES["plain"]
    scores, _, V = tiny_problem(seed=0, m=m, n=n)
    key = jax.random.PRNGKey(0)
    counts = {}
    for refit_every in (tau, 10**6):
        config = _config(m, n, m * batch + extra, batch_size=batch, refit_every=refit_every)
        text = jax.jit(engine.make_run(config, "pulse")).lower(key, scores, V, _params()).as_text()
        counts[refit_every] = text.count("stablehlo.case")
    kernel = engine.bind(config, "pulse")
    params = engine.resolve_params(_params(), kernel.plugins)
    in_init = jax.jit(kernel.init).lower(key, scores, V, params).as_text().count("stablehlo.case")
    assert counts[10**6] == in_init and counts[tau] > in_init
