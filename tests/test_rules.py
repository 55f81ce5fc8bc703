"""Sampling rules as plug-ins: Top-Two and successive halving against the NumPy reference loop,
successive halving's budget schedule, and the interface's contracts."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_problem
from reference import assert_engine_agrees

from pulse_jax import engine, registry, rules
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError
from pulse_jax.engine.params import BanditParams
from pulse_jax.rules.successive_halving import schedule

CASES = {   # name: (m, n, bandit cells, batch, refit_every)
    "plain": (6, 40, 100, 4, 5),
    "exhausts-models-partial-batches": (5, 46, 190, 8, 3),
    "seven-models": (7, 48, 160, 4, 4),
}


def _config(case):
    m, n, extra, batch, tau = CASES[case]
    return BanditConfig(n_models=m, n_examples=n, budget=m * batch + extra, batch_size=batch, refit_every=tau,
                        record_estimates=True, init_refit_epochs=20, refit_epochs=5)


PARAMS = BanditParams(init_refit_lr=0.01, refit_lr=0.1)


@pytest.mark.parametrize("rule", ["top_two", "top_two_interval", "successive_halving", "lucb_top_2"])
@pytest.mark.parametrize("method", ["ucbe", "pulse"])
@pytest.mark.parametrize("case", list(CASES))
def test_rule_matches_the_numpy_reference_step_for_step(rule, method, case):
    """Same draws (keys, uniforms), independent arithmetic: every choice, recommendation and count agrees
    (tolerances: see ``reference.assert_engine_agrees``)."""
    named = {"top_two_interval": rules.top_two(challenger="interval"), "lucb_top_2": rules.lucb_top_k(2)}
    config = _config(case)
    scores, _, V = tiny_problem(seed=list(CASES).index(case), m=config.n_models, n=config.n_examples)
    assert_engine_agrees(config, engine.Plugins(method, named.get(rule, rule)), scores, V, PARAMS)


def test_top_two_pulls_the_leader_at_its_leader_fraction():
    """The share of pulls that go to the current empirical leader is beta (0.2 and 0.8): 16 x 100 pulls
    give a binomial standard error under 0.015, so 0.05 is over 3 SE; a rule that ignored beta fails."""
    scores, _, V = tiny_problem(seed=3, m=6, n=1000)   # no model runs out of examples (that forces the other)
    config = BanditConfig(n_models=6, n_examples=1000, budget=6 * 4 + 400, batch_size=4, record_estimates=True)
    plugins = engine.Plugins("ucbe", rules.top_two())
    run = engine.make_run(config, plugins)
    kernel = engine.bind(config, plugins)
    keys = jax.random.split(jax.random.PRNGKey(0), 16)
    # beta is traced (rule.leader_fraction): both values run the same two compiled programs.
    first = jax.jit(jax.vmap(lambda k, params: kernel.init(k, scores, V, params)[1].sums, in_axes=(0, None)))
    runs = jax.jit(jax.vmap(run, in_axes=(0, None, None, None)))
    for beta in (0.2, 0.8):
        params = engine.resolve_params({"rule.leader_fraction": beta}, kernel.plugins)
        init, out = first(keys, params), runs(keys, scores, V, params)
        before = np.concatenate([np.asarray(init.obs_sum / init.n_obs)[:, None],
                                 np.asarray(out.steps.estimates)[:, :-1]], axis=1)
        chosen = np.asarray(out.steps.chosen)
        clear = np.sum(before == before.max(axis=2, keepdims=True), axis=2) == 1   # no tie for the lead
        leader = before.argmax(axis=2)
        share = np.mean((chosen == leader)[clear & (chosen >= 0)])
        assert abs(share - beta) < 0.05, (beta, share)


def _expected_pulls(n_models, bandit_budget, batch):
    """Karnin's schedule written out: each model's batches, best survivor first. Phase r gives its k_r
    survivors t_r batches each; after the last halving the survivor takes what rounding left."""
    total, phases = schedule(n_models, bandit_budget, batch)
    k, used, plan = n_models, 0, []
    for r in range(phases):
        t_r = (total - used) // k if r == phases - 1 else total // (k * phases)
        plan.append((k, t_r))
        used += k * t_r
        k = (k + 1) // 2
    pulls = [sum(t for k_r, t in plan if j < k_r) for j in range(n_models)]
    pulls[0] += total - used
    return pulls, total


@pytest.mark.parametrize("m", [2, 5, 8])
def test_successive_halving_spends_exactly_its_schedule(m):
    """No model is exhausted: the models' batch counts are exactly the schedule's (phase r: t_r to each
    of its survivors), they add up to P = floor(bandit budget / B), and the recommendation is the final
    survivor."""
    n, batch, bandit_cells = 400, 4, 4 * 97   # 97 batches: not a multiple of anything convenient
    scores, _, V = tiny_problem(seed=m, m=m, n=n)
    config = BanditConfig(n_models=m, n_examples=n, budget=m * batch + bandit_cells, batch_size=batch)
    for method in ("ucbe", "pulse"):
        out = jax.jit(engine.make_run(config, engine.Plugins(method, "successive_halving")))(jax.random.PRNGKey(1), scores, V)
        chosen = np.asarray(out.steps.chosen)
        pulls = np.bincount(chosen[chosen >= 0], minlength=m)
        expected, total = _expected_pulls(m, bandit_cells, batch)
        assert sorted(pulls.tolist(), reverse=True) == expected
        assert pulls.sum() == total == 97
        assert int(out.steps.best[-1]) == int(np.argmax(pulls))


def test_lucb_top_k_pulls_the_pair_its_certificate_waits_on():
    """With k = 3 every pull is the set's member with the lowest lower bound or the best outsider
    (checked from the recorded bounds)."""
    scores, _, V = tiny_problem(seed=3, m=6, n=48)
    runs = {}
    for name, rule in (("top3", rules.lucb_top_k(3)),):
        config = BanditConfig(n_models=6, n_examples=48, budget=6 * 4 + 120, batch_size=4, refit_every=5,
                              record_estimates=True)
        runs[name] = jax.jit(engine.make_run(config, engine.Plugins("ucbe", rule)))(jax.random.PRNGKey(2), scores, V, None)
    top3 = runs["top3"].steps
    est, low, high = (np.asarray(x) for x in (top3.estimates, top3.low, top3.high))
    chosen = np.asarray(top3.chosen)
    checked = 0
    for t in range(1, len(chosen)):   # the bounds the rule saw at step t are those recorded after step t - 1
        if chosen[t] < 0:
            continue
        member = np.zeros(6, bool)
        member[np.argsort(-est[t - 1], kind="stable")[:3]] = True
        weakest = np.flatnonzero(member & (low[t - 1] == low[t - 1][member].min()))
        strongest = np.flatnonzero(~member & (high[t - 1] == high[t - 1][~member].max()))
        assert chosen[t] in set(weakest) | set(strongest), t
        checked += 1
    assert checked > 20
    with pytest.raises(ValueError, match="k must be >= 1"):
        rules.lucb_top_k(0)


def test_rule_interface_contracts():
    """Names resolve through the one registry; objects pass through; needs_interval is enforced per method."""
    assert registry.sampling_rule("lucb") is rules.lucb()
    assert registry.sampling_rule(rules.top_two(0.3)) is rules.top_two(0.3)
    assert engine.Plugins("ucbe", rule="top_two").rule is rules.top_two()
    with pytest.raises(PulseInputError, match="Plugins.rule: unknown sampling rule 'nope'"):
        engine.Plugins("ucbe", rule="nope")
    with pytest.raises(PulseInputError, match="leader_fraction"):
        rules.top_two(1.5)
    config = BanditConfig(n_models=3, n_examples=10, budget=30, batch_size=2)
    with pytest.raises(PulseInputError, match="naive.*no valid interval.*lucb"):
        engine.make_run(config, engine.Plugins("naive", rule="lucb"))
    assert math.ceil(math.log2(5)) == schedule(5, 100, 4)[1]


@pytest.mark.integration   # 14-17 s: the second test command keeps the default run within its time
def test_a_plugins_own_traced_number_sweeps_without_recompiling(tmp_path, capsys):
    """Top-Two's ``leader_fraction`` is declared by the rule and traced: a sweep over it compiles once,
    each point equals ``simulate`` with that value, the NumPy reference follows it, and a name or value
    the plug-ins do not declare is refused naming it."""
    import pulse_jax as pj
    from pulse_jax import cli
    from sweep_compiles import count_compiles

    scores, _, V = tiny_problem(seed=2, m=6, n=200)
    config = BanditConfig(n_models=6, n_examples=200, budget=6 * 4 + 200, batch_size=4)
    top_two = pj.Plugins("ucbe", rule="top_two")
    with count_compiles() as compiles:
        result = pj.sweep(scores, config, top_two, {"leader_fraction": [0.2, 0.8]}, reps=6)
        first = len(compiles)
        pj.sweep(scores, config, top_two, {"leader_fraction": [0.3, 0.6]}, reps=6, seed=1)
        assert len(compiles) == first                           # new values: nothing compiled
    assert result.axes == ("leader_fraction",) and result.values(1) == {"leader_fraction": 0.8}
    alone = pj.simulate(scores, config, top_two, reps=6, params={"rule.leader_fraction": 0.8})
    np.testing.assert_array_equal(alone.chosen, result.results[1].chosen)
    assert not np.array_equal(result.results[0].chosen, result.results[1].chosen)
    import dataclasses

    recorded = dataclasses.replace(config, record_estimates=True)
    params = pj.RunParams(BanditParams(), (), pj.TopTwoParams(leader_fraction=0.8), ())
    assert_engine_agrees(recorded, top_two, scores, V, params, seeds=(3,))
    with pytest.raises(PulseInputError, match="unknown parameter 'leader_fractoin'; this run's are .*"
                                              r"rule.leader_fraction, rule.exploration"):
        pj.simulate(scores, config, top_two, reps=2, params={"leader_fractoin": 0.5})
    with pytest.raises(PulseInputError, match=r"rule.leader_fraction: leader_fraction=1.5 is out of range; it must "
                                              r"lie in \(0, 1\)"):
        pj.sweep(scores, config, top_two, {"leader_fraction": [0.5, 1.5]}, reps=2)
    np.savez(tmp_path / "cand.npz", scores=scores)
    assert cli.main(["sweep", "--scores", str(tmp_path / "cand.npz"), "--method", "ucbe", "--rule", "top_two",
                     "--grid", "leader_fraction=0.25,0.75", "--reps", "4", "--batch-size", "4", "--budget", "224",
                     "--quiet", "--out", str(tmp_path / "sw")]) == 0
    assert "leader_fraction" in capsys.readouterr().out


def test_the_interval_challenger_is_never_a_model_already_excluded():
    """Top-Two's interval challenger is the model whose upper bound lies furthest above the leader's lower
    bound: while any model is not yet excluded (``high_j >= low_L``), an excluded one is never chosen.
    Random asymmetric bounds (as betting sequences give); the symmetric cost, built from the estimates
    and the half-widths, does choose excluded models on the same draws (what makes small batches cost more
    with it: docs/confidence.md, "Batch size and the challenger")."""
    from pulse_jax.rules.top_two import interval_cost, symmetric_interval_cost

    rng = np.random.default_rng(0)
    symmetric_wrong = 0
    for _ in range(2000):
        m = 6
        low = rng.uniform(0, 0.8, m)
        high = low + rng.uniform(0, 0.3, m)
        est = low + rng.uniform(0, 1, m) * (high - low)     # anywhere inside its interval
        leader = int(np.argmax(est))
        open_ = [j for j in range(m) if j != leader and high[j] >= low[leader]]
        if not open_:
            continue
        for cost_fn, is_new in ((interval_cost, True), (symmetric_interval_cost, False)):
            cost = np.asarray(cost_fn(jnp.asarray(est), jnp.asarray(low), jnp.asarray(high), leader), np.float64)
            cost[leader] = np.inf
            pick = int(np.argmin(cost))
            if is_new:
                assert pick in open_, (low, high, est)
            else:
                symmetric_wrong += pick not in open_
    assert symmetric_wrong >= 20   # 42 of the 2,000 draws
