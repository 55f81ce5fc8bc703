"""Certificates beyond the exact best: epsilon-good, top-k and tie groups.

* The decision logic by exact enumeration: on every configuration of bounds from a small grid,
  each rule's ``done`` / ``claim`` equal their definitions written out by brute force (every model,
  every k-subset), and ``groups`` keeps its ordering property.
* Validity by Monte Carlo: 1,000 repetitions per case at delta = 0.3, with the true means placed
  below, at and just above epsilon, a near-tie at the k-th place, and sign-flipped predictions for
  PULSE. The guarantee is P(wrong claim) <= delta; the check is error rate <= delta + 3 standard
  errors (sqrt(0.3 * 0.7 / 1000) = 0.0145), so a rule wrong more than ~34% of the time fails. A
  negative control (a rule that claims from the estimates alone) shows the check fails when the
  claims are wrong.
* ``stop.epsilon`` and ``stop.size`` are traced: a sweep compiles once; Selector, simulate and the
  CLI run every certificate.
"""
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from sweep_compiles import count_compiles
from pulse_jax import cli, stopping
from pulse_jax.stats import factorization
from pulse_jax.errors import PulseInputError
from pulse_jax.stopping import StopInputs
from conftest import as_simulated

DELTA, REPS = 0.3, 1000
SLACK = 3 * math.sqrt(DELTA * (1 - DELTA) / REPS)


def _configurations(m=3, grid=(0.0, 0.25, 0.5, 0.75, 1.0)):
    """Every (low, high) with low <= high on the grid for each of m models (15^3 = 3,375 for 3); the
    estimate mid-interval. Three (configurations, m) arrays: estimates, lows, highs."""
    pairs = [(a, b) for a in grid for b in grid if a <= b]
    combos = np.asarray(list(itertools.product(pairs, repeat=m)), np.float32)   # (configurations, m, 2)
    low, high = combos[..., 0], combos[..., 1]
    return (low + high) / 2, low, high


def _decisions(rule, params, est, low, high):
    """The rule's ``done`` and ``claim`` on every configuration at once: one compiled, vmapped call
    (the rule's functions are pure and traced like the engine's)."""
    def one(e, lo, hi):
        inputs = StopInputs(jnp.int32(1), jnp.int32(0), 100, e, lo, hi, jnp.bool_(False), jnp.int32(-1))
        return rule.done(inputs, params), rule.claim(inputs, params)

    done, claim = jax.jit(jax.vmap(one))(est, low, high)
    return np.asarray(done), np.asarray(claim)


def test_epsilon_good_equals_its_definition_on_every_configuration():
    rule = stopping.epsilon_good()
    est, lows, highs = _configurations()
    for eps in (0.0, 0.25):
        done, claims = _decisions(rule, stopping.EpsilonParams(eps), est, lows, highs)
        for low, high, stop, claim in zip(lows, highs, done, claims):
            good = [i for i in range(3) if all(low[i] >= high[j] - eps for j in range(3) if j != i)]
            assert bool(stop) == bool(good), (eps, low, high)
            assert claim.sum() == (1 if good else 0)
            if good:
                assert int(np.flatnonzero(claim)[0]) in good


def test_top_k_equals_its_definition_on_every_configuration():
    est, lows, highs = _configurations()
    for k in (1, 2):
        done, claims = _decisions(stopping.top_k(k), (), est, lows, highs)
        for low, high, stop, claim in zip(lows, highs, done, claims):
            sets = [set(s) for s in itertools.combinations(range(3), k)
                    if min(low[i] for i in s) >= max(high[j] for j in range(3) if j not in s)]
            assert bool(stop) == bool(sets), (k, low, high)
            claimed = set(np.flatnonzero(claim).tolist())
            assert claimed in sets if sets else not claimed


def test_tie_group_equals_its_definition_and_groups_keep_their_order():
    rule = stopping.tie_group()
    est, lows, highs = _configurations()
    for size in (1.0, 2.0):
        done, claims = _decisions(rule, stopping.TieGroupParams(size), est, lows, highs)
        for low, high, stop, claim in zip(lows, highs, done, claims):
            group = {j for j in range(3) if high[j] >= low.max()}
            assert bool(stop) == (len(group) <= size)
            assert set(np.flatnonzero(claim).tolist()) == (group if len(group) <= size else set())
    for e, low, high in zip(est, lows, highs):
        groups = stopping.groups(e, low, high)
        assert sorted(i for g in groups for i in g) == [0, 1, 2]
        assert set(groups[0]) == {j for j in range(3) if high[j] >= low.max()}
        for a, g in enumerate(groups):   # a group's head is above every model of the later groups
            assert all(low[g[0]] > high[j] for later in groups[a + 1:] for j in later)


def _matrix(means, n, seed):
    """Rows with exactly round(mean * n) ones, shuffled: each row's mean is known exactly."""
    rng = np.random.default_rng(seed)
    rows = []
    for mu in means:
        row = np.zeros(n, np.float32)
        row[:int(round(mu * n))] = 1
        rng.shuffle(row)
        rows.append(row)
    return np.array(rows)


N = 200


@pytest.fixture(scope="module")
def flipped_V():
    """Embeddings fitted on flipped history: PULSE's predictions point the wrong way."""
    history = np.vstack([_matrix(np.random.default_rng(i).uniform(0.4, 0.8, 6), N, 100 + i) for i in range(6)])
    return factorization.fit_example_embeddings(1.0 - history, rank=3)


CASES = {
    # epsilon 0.02: the second model is exactly epsilon below the best (a correct claim), the third
    # 0.005 more (just above epsilon: a wrong claim), the fourth well below.
    "epsilon_at_and_above": ("epsilon_good", {"stop.epsilon": 0.02}, [0.70, 0.68, 0.675, 0.66, 0.60, 0.55]),
    # every gap below epsilon = 0.05 at the top: any of the top three is correct
    "epsilon_below": ("epsilon_good", {"stop.epsilon": 0.05}, [0.70, 0.69, 0.68, 0.60, 0.58, 0.50]),
    # the 3rd and 4th places 1 / n apart: a near-tie at the k-th place
    "top_3_near_tie": ("top_k", {"engine.cs_simultaneous": 1.0}, [0.75, 0.72, 0.66, 0.655, 0.60, 0.55]),
    "tie_group_of_2": ("tie_group", {"stop.size": 2.0}, [0.70, 0.695, 0.69, 0.66, 0.60, 0.55]),
}


@pytest.mark.slow
@pytest.mark.optimized   # 1,000 repetitions to a certificate, each case a program of its own
@pytest.mark.parametrize("method", ["ucbe", "pulse"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_claims_are_at_most_delta(case, method, flipped_V):
    """1,000 repetitions; PULSE runs with sign-flipped predictions (its validity must not rest on them)."""
    name, numbers, means = CASES[case]
    scores = _matrix(means, N, seed=7)
    stop = stopping.top_k(3) if name == "top_k" else name
    rule = pj.lucb_top_k(3) if name == "top_k" else "lucb"     # what select --top-k samples by
    config = pj.BanditConfig(n_models=6, n_examples=N, budget=6 * N, batch_size=4, refit_every=10)
    result = pj.simulate(scores, config, pj.Plugins(method, rule, stop), V=flipped_V if method == "pulse" else None, reps=REPS, seed=11,
                         params={"delta": DELTA, **numbers}, progress=False)
    claims = result.claims()
    assert claims["stopped_fraction"] > 0.9, claims     # the rule fires: the check is not vacuous
    assert claims["error_rate"] <= DELTA + SLACK, claims


@pytest.mark.slow
def test_the_validity_check_fails_a_rule_that_claims_from_estimates_alone():
    """Negative control: epsilon-good decided on the estimates (no intervals) is wrong far more than delta."""
    def done(inputs, params):
        return inputs.t >= 1

    def claim(inputs, params):
        return jnp.arange(inputs.estimates.shape[0]) == jnp.argmax(inputs.estimates)

    eager = pj.StoppingRule("eager", done, claim=claim, params=stopping.EpsilonParams(0.02),
                            holds=stopping.epsilon_good().holds)
    scores = _matrix(CASES["epsilon_at_and_above"][2], N, seed=7)
    config = pj.BanditConfig(n_models=6, n_examples=N, budget=6 * N, batch_size=4)
    claims = pj.simulate(scores, config, pj.Plugins("ucbe", stop=eager), reps=REPS, seed=11, params={"delta": DELTA},
                         progress=False).claims()
    assert claims["error_rate"] > DELTA + SLACK, claims


def test_top_k_needs_the_upper_bounds_it_rests_on():
    scores = _matrix([0.7, 0.6, 0.5, 0.4, 0.3, 0.2], 40, seed=0)
    config = pj.BanditConfig(n_models=6, n_examples=40, budget=240, batch_size=4)
    top3 = pj.Plugins("ucbe", stop=stopping.top_k(3))
    with pytest.raises(PulseInputError, match=r"cs_simultaneous must be >= log 3 / log 6 = 0.613"):
        pj.simulate(scores, config, top3, reps=2, params={"cs_simultaneous": 0.0}, progress=False)
    with pytest.raises(PulseInputError, match="needs more than 6 candidates"):
        pj.simulate(scores, config, pj.Plugins("ucbe", stop=stopping.top_k(6)), reps=2, progress=False)
    ok = pj.simulate(scores, config, top3, reps=2, params={"cs_simultaneous": math.log(3) / math.log(6)},
                     progress=False)
    assert ok.claims()["stopped_fraction"] == 1.0 and ok.claimed[:, :3].all()


def test_epsilon_is_swept_without_recompiling():
    """``stop.epsilon`` is traced: a second sweep over new values compiles nothing; each point equals
    ``simulate`` with its value, and a looser epsilon never stops later."""
    scores = _matrix([0.70, 0.68, 0.66, 0.60, 0.55, 0.50], 80, seed=3)
    config = pj.BanditConfig(n_models=6, n_examples=80, budget=480, batch_size=4)
    plugins = pj.Plugins("ucbe", "lucb", "epsilon_good")
    with count_compiles() as compiles:
        swept = pj.sweep(scores, config, plugins, {"stop.epsilon": [0.0, 0.02, 0.05, 0.1]}, reps=8, seed=2,
                         progress=False)
        first = len(compiles)
        pj.sweep(scores, config, plugins, {"epsilon": [0.01, 0.03, 0.04, 0.2]}, reps=8, seed=2, progress=False)
        assert len(compiles) == first
    cells = [r.claims()["mean_cells"] for r in swept.results]
    assert cells == sorted(cells, reverse=True) and cells[-1] < cells[0]   # a looser epsilon stops sooner
    alone = pj.simulate(scores, config, plugins, reps=8, seed=2, params={"stop.epsilon": 0.05}, progress=False)
    np.testing.assert_array_equal(alone.spent, swept.results[2].spent)
    np.testing.assert_array_equal(alone.claimed, swept.results[2].claimed)


def test_epsilon_zero_is_exact_certification():
    scores = _matrix([0.70, 0.66, 0.62, 0.60, 0.55, 0.50], 80, seed=4)
    config = pj.BanditConfig(n_models=6, n_examples=80, budget=480, batch_size=4)
    exact = pj.simulate(scores, config, pj.Plugins("ucbe", "lucb", "certified"), reps=16, seed=5, progress=False)
    eps0 = pj.simulate(scores, config, pj.Plugins("ucbe", "lucb", "epsilon_good"), reps=16, seed=5,
                       params={"stop.epsilon": 0.0}, progress=False)
    np.testing.assert_array_equal(exact.spent[:, -1], eps0.spent[:, -1])
    np.testing.assert_array_equal(exact.certified_model, np.argmax(eps0.claimed, axis=1))


def test_selector_stops_where_the_simulation_stops_and_says_what_it_certified():
    scores = _matrix([0.72, 0.70, 0.62, 0.60, 0.55, 0.50], 120, seed=6)
    models = [f"m{i}" for i in range(6)]
    for stop, numbers in (("epsilon_good", {"stop.epsilon": 0.03}), ("tie_group", {"stop.size": 2.0})):
        config = pj.BanditConfig(n_models=6, n_examples=120, budget=720, batch_size=4)
        sim = pj.simulate(scores, config, pj.Plugins("ucbe", "lucb", stop), reps=1, seed=9, params=numbers, progress=False,
                          model_names=models)
        sel = pj.Selector(models, 120, 720, method="ucbe", batch_size=4, seed=9, stop=stop, concurrency=1,
                          **as_simulated(rule="lucb", params=numbers))
        report = pj.run(lambda model, ids: scores[models.index(model), ids].tolist(), sel)
        assert report.stopped and report.spent == sim.spent[0, -1]
        assert list(report.claimed) == [models[i] for i in np.flatnonzero(sim.claimed[0])]
        assert report.certificate == sim.certificate(0)
        if stop == "tie_group":   # the first tie group is the leader's group the rule stopped on
            assert set(report.to_dict()["groups"][0]) == set(report.claimed)


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_select_takes_epsilon_top_k_and_tie_group(tmp_path, capsys):
    scores = _matrix([0.74, 0.72, 0.70, 0.60, 0.55, 0.50], 160, seed=8)
    models = [f"m{i}" for i in range(6)]
    (tmp_path / "models.txt").write_text("\n".join(models) + "\n")
    np.save(tmp_path / "scores.npy", scores)
    (tmp_path / "scorer.py").write_text(
        "import numpy as np\nS = np.load(%r)\nM = %r\n"
        "def score(model, ids):\n    return S[M.index(model), [int(i) for i in ids]].tolist()\n"
        % (str(tmp_path / "scores.npy"), models))
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        for flag, value, stop in (("--epsilon", "0.05", "epsilon_good"), ("--top-k", "2", "top_k"),
                                  ("--tie-group", "2", "tie_group")):
            log = tmp_path / f"{stop}.jsonl"
            cli.main(["select", "--models", str(tmp_path / "models.txt"), "--examples", "160", "--budget", "960",
                      "--batch-size", "4", "--method", "ucbe", "--evaluate", "scorer:score", "--log", str(log),
                      "--quiet", flag, value])
            out = json.loads((tmp_path / f"{stop}_report" / "report.json").read_text())
            assert out["stop"] == stop and out["stopped"], out["certificate"]
            assert "with probability at least 0.95" in out["certificate"]
        err = capsys.readouterr().err
        assert "so their level is raised to cover 2 of the 6 together (cs_simultaneous" in err   # certification levels
        assert "--top-k 2 samples by lucb_top_2" in err     # the set's rule, as no --rule was given
        provenance = json.loads((tmp_path / "top_k_report" / "provenance.json").read_text())
        assert "lucb_top_2" in json.dumps(provenance)
        assert cli.main(["select", "--models", str(tmp_path / "models.txt"), "--examples", "160", "--budget", "960",
                      "--method", "ucbe", "--evaluate", "scorer:score", "--log", str(tmp_path / "x.jsonl"),
                      "--epsilon", "0.05", "--stop", "certified"]) == 2
        assert "--epsilon sets the stopping rule; drop --stop certified" in capsys.readouterr().err
    finally:
        sys.path.remove(str(tmp_path))
