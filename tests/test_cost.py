"""Costs as data: the certificates about cost, cost-aware sampling, money metering and bad cost input.

* The two certificates' decision logic by exact enumeration: on every configuration of bounds from a
  small grid and several cost vectors (ties in cost included), ``done`` / ``claim`` equal their
  definitions written out in NumPy; at exhaustion (bounds = means) the claim is the truth for random
  instances with ties in cost and accuracy.
* Validity by Monte Carlo: 1,000 repetitions at delta = 0.3 on a matrix whose cheap models sit just
  below and above the epsilon line, under the certificate's rule, the greedy index rule and PULSE
  with sign-flipped predictions; the error rate must stay <= delta + 3 standard errors
  (3 sqrt(0.21 / 1000) = 0.043), and every repetition certifies within the whole matrix. A negative
  control (the claims made from the estimates alone) is wrong far more often, so the check can fail.
* Equal costs change nothing: the same choices, cell for cell, as a run without costs.
* Money against a NumPy reference: per-model costs give ``sum(size x cost[chosen])`` step by step;
  per-cell costs of a run that sees every cell give the matrix's total.
"""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import stopping
from pulse_jax.errors import PulseInputError
from pulse_jax.stopping import StopInputs
from conftest import as_simulated

COSTS = ([1.0, 2.0, 3.0], [1.0, 1.0, 3.0], [3.0, 1.0, 1.0], [2.0, 2.0, 2.0])


def _batch(configurations, cost):
    est, low, high = (jnp.asarray(np.array(a), jnp.float32) for a in zip(*configurations))
    k, m = est.shape
    return StopInputs(jnp.zeros(k, jnp.int32), jnp.zeros(k, jnp.int32), 100, est, low, high, jnp.zeros(k, bool),
                      jnp.full(k, -1, jnp.int32), jnp.broadcast_to(jnp.asarray(cost, jnp.float32), (k, m)))


def _configurations(m=3, grid=(0.0, 0.25, 0.5, 0.75, 1.0)):
    pairs = [(a, b) for a in grid for b in grid if a <= b]
    for combo in itertools.product(pairs, repeat=m):
        low = np.array([p[0] for p in combo])
        high = np.array([p[1] for p in combo])
        yield (low + high) / 2, low, high


def _on_every_configuration(fns, eps, cost):
    """Every configuration of `_configurations` and each of ``fns`` (a rule's ``done``, ``claim``,
    ``focus``) on all of them at once."""
    configurations = list(_configurations())
    inputs = _batch(configurations, cost)
    params = stopping.EpsilonParams(eps)
    in_axes = (StopInputs(0, 0, None, 0, 0, 0, 0, 0, 0), None)
    return configurations, *(np.asarray(jax.vmap(fn, in_axes=in_axes)(inputs, params)) for fn in fns)


def _evaluate(rule, eps, cost):
    return _on_every_configuration((rule.done, rule.claim), eps, cost)


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_cheapest_within_equals_its_definition_on_every_configuration(eps):
    rule = stopping.cheapest_within()
    for cost in COSTS:
        configurations, done, claim = _evaluate(rule, eps, cost)
        c = np.asarray(cost)
        for (est, low, high), d, cl in zip(configurations, done, claim):
            good = [i for i in range(3) if all(low[i] >= high[j] - eps for j in range(3) if j != i)]
            bad = [j for j in range(3) if high[j] < low.max() - eps]
            ok = [i for i in good if all(j in bad for j in range(3) if c[j] < c[i])]
            assert bool(d) == bool(ok), (cost, eps, low, high)
            assert cl.sum() == (1 if ok else 0)
            if ok:
                assert int(np.flatnonzero(cl)[0]) in ok


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_cost_front_equals_its_definition_on_every_configuration(eps):
    rule = stopping.cost_front()
    for cost in COSTS:
        configurations, done, claim = _evaluate(rule, eps, cost)
        c = np.asarray(cost)
        for (est, low, high), d, cl in zip(configurations, done, claim):
            rivals = [[j for j in range(3) if j != i and c[j] <= c[i]] for i in range(3)]
            dominated = [any(low[j] > high[i] + eps for j in rivals[i]) for i in range(3)]
            front = [all(high[j] <= low[i] + eps for j in rivals[i]) for i in range(3)]
            placed = all(a or b for a, b in zip(dominated, front))
            assert bool(d) == placed, (cost, eps, low, high)
            want = [front[i] and not dominated[i] and placed for i in range(3)]
            assert list(cl) == want, (cost, eps, low, high)


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_front_focus_is_the_cheapest_open_model_and_what_decides_it(eps):
    """The front's focus on every configuration: the cheapest unplaced model (among equal costs, the
    best estimate: it is likeliest to decide the others), and beside it the model at most as
    expensive with the best estimate if it looks dominated (the witness that must clear it), else
    the one with the largest upper bound (the threat it must clear); nothing once all are placed."""
    rule = stopping.cost_front()
    for cost in COSTS:
        configurations, focus = _on_every_configuration((rule.focus,), eps, cost)
        c = np.asarray(cost)
        for (est, low, high), got in zip(configurations, focus):
            rivals = [np.array([j != i and c[j] <= c[i] for j in range(3)]) for i in range(3)]
            placed = [any(low[j] > high[i] + eps for j in np.flatnonzero(rivals[i]))
                      or all(high[j] <= low[i] + eps for j in np.flatnonzero(rivals[i])) for i in range(3)]
            open_ = [i for i in range(3) if not placed[i]]
            want = np.zeros(3, bool)
            if open_:
                cheapest = min(c[i] for i in open_)
                i = max((k for k in open_ if c[k] == cheapest), key=lambda k: (est[k], -k))
                want[i] = True
                if rivals[i].any():
                    dominated = any(est[j] > est[i] + eps for j in np.flatnonzero(rivals[i]))
                    partner = np.where(rivals[i], est if dominated else high, -np.inf)
                    want[int(np.argmax(partner))] = True
            assert list(got) == list(want), (cost, eps, est, low, high)


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_cheapest_focus_is_the_candidate_and_what_decides_it(eps):
    """The cheapest-within focus on every configuration: the candidate (of the cheapest models not
    certified not good, the largest upper bound), and the other model with the largest upper bound if
    the candidate looks good enough, else the best-estimated other model."""
    rule = stopping.cheapest_within()
    for cost in COSTS:
        configurations, focus = _on_every_configuration((rule.focus,), eps, cost)
        c = np.asarray(cost)
        for (est, low, high), got in zip(configurations, focus):
            open_ = [i for i in range(3) if not high[i] < low.max() - eps]
            cheapest = min(c[i] for i in open_)
            x = max((k for k in open_ if c[k] == cheapest), key=lambda k: (high[k], -k))
            others = np.arange(3) != x
            partner = np.where(others, high if est[x] >= est.max() - eps else est, -np.inf)
            want = np.zeros(3, bool)
            want[[x, int(np.argmax(partner))]] = True
            assert list(got) == list(want), (cost, eps, est, low, high)


def _truth_cheapest(mu, cost, eps):
    good = mu >= mu.max() - eps - 1e-12
    return min(np.flatnonzero(good), key=lambda i: cost[i])


def test_at_exhaustion_both_certificates_state_the_truth_with_ties_in_cost_and_accuracy():
    """Bounds equal to the means (every model seen in full): both rules fire and their claims hold,
    on 300 random instances drawn from few values, so ties in cost and in accuracy are frequent."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(2, 7))
        # Binary fractions: float32 bounds and float64 means agree exactly, so gaps of exactly epsilon stay exact.
        mu = rng.choice([0.5, 0.53125, 0.5625, 0.59375, 0.625], m)
        cost = rng.choice([1.0, 2.0, 5.0], m)
        eps = float(rng.choice([0.0, 0.03125, 0.0625]))
        inputs = StopInputs(jnp.int32(1), jnp.int32(0), 100, jnp.asarray(mu, jnp.float32), jnp.asarray(mu, jnp.float32),
                            jnp.asarray(mu, jnp.float32), jnp.bool_(False), jnp.int32(-1), jnp.asarray(cost, jnp.float32))
        params = stopping.EpsilonParams(eps)
        for rule in (stopping.cheapest_within(), stopping.cost_front()):
            assert bool(rule.done(inputs, params)), (rule.name, mu, cost, eps)
            claim = np.asarray(rule.claim(inputs, params))
            assert rule.holds(claim, mu, params, cost), (rule.name, mu, cost, eps, claim)
        claim = np.asarray(stopping.cheapest_within().claim(inputs, params))
        x = int(np.flatnonzero(claim)[0])
        assert cost[x] == cost[_truth_cheapest(mu, cost, eps)]


def test_holds_rejects_false_claims():
    params = stopping.EpsilonParams(0.01)
    mu, cost = np.array([0.60, 0.595, 0.50]), np.array([10.0, 2.0, 1.0])
    cheapest = stopping.cheapest_within()
    assert cheapest.holds(np.array([False, True, False]), mu, params, cost)       # within 0.01, cheaper one is not
    assert not cheapest.holds(np.array([True, False, False]), mu, params, cost)   # a cheaper model is good enough
    assert not cheapest.holds(np.array([False, False, True]), mu, params, cost)   # not within 0.01
    front = stopping.cost_front()
    assert front.holds(np.array([True, True, True]), mu, params, cost)   # each beats the cheaper ones
    assert not front.holds(np.array([False, True, True]), mu, params, cost)   # model 0 is not beaten
    assert not front.holds(np.array([True, True, False]), mu, params, cost)   # model 2 is the cheapest: never beaten
    tied = np.array([0.6, 0.6, 0.5])
    assert front.holds(np.array([True, True, True]), tied, stopping.EpsilonParams(0.0), np.array([2.0, 2.0, 1.0]))


def _cheap_matrix(seed=0):
    """8 models x 300 examples. With seed 0 the best is model 6 (0.697, cost 5); the cheapest model within
    0.02 of it is model 2 (0.680, cost 1: 0.003 inside the line), then model 3 (0.687, cost 2), so a
    rule that wrongly rules out model 2 claims model 3 and is wrong."""
    rng = np.random.default_rng(seed)
    means = np.array([0.70, 0.69, 0.69, 0.685, 0.60, 0.55, 0.62, 0.50])
    cost = np.array([20.0, 10.0, 1.0, 2.0, 1.0, 0.5, 5.0, 0.5])
    scores = (rng.random((8, 300)) < means[:, None]).astype(np.float32)
    return scores, cost


REPS, DELTA = 1000, 0.3
SLACK = 3 * math.sqrt(DELTA * (1 - DELTA) / REPS)   # 0.0435: a rule wrong > 34% of the time fails


@pytest.fixture(scope="module")
def flipped_V():
    """Embeddings fitted on a flipped history: PULSE's predictions point the wrong way (adversarial)."""
    rng = np.random.default_rng(3)
    history = (rng.random((12, 300)) < rng.uniform(0.4, 0.8, 12)[:, None]).astype(np.float32)
    return pj.fit_example_embeddings(1.0 - history, rank=3)


@pytest.mark.integration   # 6 x 1,000 repetitions: the second test command
@pytest.mark.parametrize("stop", ["cheapest_within", "cost_front"])
@pytest.mark.parametrize("method, rule", [("ucbe", "focus"), ("ucbe", "ucbe"), ("pulse", "focus")])
def test_cost_certificates_are_valid_and_certify_within_the_matrix(stop, method, rule, flipped_V):
    """1,000 repetitions at delta = 0.3, the cheap models just below and above the 0.02 line: under the
    certificate's own rule, under the greedy index rule (which pulls where the estimates look best, not
    where the claim waits) and under PULSE with sign-flipped predictions, wrong claims stay within
    delta + 3 standard errors, and every repetition certifies within the whole matrix."""
    scores, cost = _cheap_matrix()
    m, n = scores.shape
    cfg = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, record_steps=False)
    res = pj.simulate(scores, cfg, pj.Plugins(method, rule, getattr(pj, stop)(0.02)), V=flipped_V if method == "pulse" else None, reps=REPS, seed=1,
                      cost=cost, params={"delta": DELTA})
    claims = res.claims()
    assert claims["stopped_fraction"] == 1.0
    assert claims["error_rate"] <= DELTA + SLACK, claims
    assert np.all(res.money[:, -1] <= (n * cost).sum() + 1e-3)


@pytest.mark.integration   # 2 x 1,000 repetitions: the second test command
@pytest.mark.parametrize("stop", ["cheapest_within", "cost_front"])
def test_the_validity_check_fails_a_cost_claim_made_from_the_estimates_alone(stop):
    """Negative control: the same claims made at the first look from the estimates (bounds collapsed onto
    them) are wrong far more often than delta, so the check above can see an invalid certificate."""
    real = getattr(pj, stop)(0.02)

    def claim(inputs, params):
        return real.claim(inputs._replace(low=inputs.estimates, high=inputs.estimates), params)

    eager = pj.StoppingRule("eager", lambda inputs, params: inputs.t >= 1, claim=claim, params=real.params,
                            holds=real.holds, uses_cost=True)
    scores, cost = _cheap_matrix()
    cfg = pj.BanditConfig(n_models=8, n_examples=300, budget=2400, batch_size=8, record_steps=False)
    claims = pj.simulate(scores, cfg, pj.Plugins("ucbe", stop=eager), reps=REPS, seed=1, cost=cost, params={"delta": DELTA}).claims()
    assert claims["error_rate"] > DELTA + SLACK, claims


def test_a_cost_certificate_needs_every_models_bounds():
    scores, cost = _cheap_matrix()
    cfg = pj.BanditConfig(n_models=8, n_examples=300, budget=2400, batch_size=8)
    with pytest.raises(PulseInputError, match="cs_simultaneous must be >= log 8 / log 8"):
        pj.simulate(scores, cfg, pj.Plugins("ucbe", "focus", pj.cheapest_within(0.02)), reps=2, cost=cost, params={"cs_simultaneous": 0.5})


@pytest.mark.parametrize("rule", ["top_two_interval", "lucb"])
def test_equal_costs_make_the_same_choices_as_no_costs(rule):
    scores, _ = _cheap_matrix()
    cfg = pj.BanditConfig(n_models=8, n_examples=300, budget=1200, batch_size=8)
    plugins = pj.Plugins("ucbe", rule, "certified")
    plain = pj.simulate(scores, cfg, plugins, reps=6, seed=3)
    priced = pj.simulate(scores, cfg, plugins, reps=6, seed=3, cost=np.full(8, 3.5))
    np.testing.assert_array_equal(plain.chosen, priced.chosen)
    np.testing.assert_allclose(priced.money, 3.5 * plain.spent, rtol=1e-6)
    np.testing.assert_allclose(plain.money, plain.spent)
    assert plain.cost is None and np.allclose(priced.cost, 3.5)


def test_money_matches_a_numpy_reference_per_model_and_per_cell():
    scores, cost = _cheap_matrix()
    m, n = scores.shape
    cfg = pj.BanditConfig(n_models=m, n_examples=n, budget=1600, batch_size=8)
    res = pj.simulate(scores, cfg, pj.Plugins("ucbe", "top_two_interval", "budget"), reps=4, seed=2, cost=cost)
    for r in range(res.reps):
        sizes = np.diff(res.spent[r])
        steps = np.where(res.chosen[r] >= 0, sizes * cost[np.maximum(res.chosen[r], 0)], 0.0)
        want = cfg.init_cells_per_model * cost.sum() + np.concatenate([[0.0], np.cumsum(steps)])
        np.testing.assert_allclose(res.money[r], want, rtol=1e-5)
    cells = np.random.default_rng(4).uniform(0.1, 3.0, (m, n))
    full = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, record_steps=False)
    res = pj.simulate(scores, full, "ucbe", reps=2, seed=2, cost=cells)
    np.testing.assert_allclose(res.money[:, -1], cells.sum(), rtol=1e-4)
    np.testing.assert_allclose(res.cost, cells.mean(1), rtol=1e-6)


@pytest.mark.parametrize("cost, needle", [
    (np.array([1.0, -1.0, 1.0, 1.0]), "cost must be finite and >= 0: model 1 is -1"),
    (np.array([1.0, np.nan, 1.0, 1.0]), "cost must be finite and >= 0: model 1 is nan"),
    (np.ones(3), "cost must have shape (n_models,) = (4,) or (n_models, n_examples) = (4, 10), got (3,)"),
    (np.ones((4, 9)), "got (4, 9)"),
    (np.array([1.0, 0.0, 1.0, 1.0]), "cost: model 1 costs nothing per cell"),
    ("cheap", "cost must be numbers"),
])
def test_bad_costs_are_refused_in_one_line(cost, needle):
    scores = (np.random.default_rng(0).random((4, 10)) < 0.5).astype(np.float32)
    cfg = pj.BanditConfig(n_models=4, n_examples=10, budget=40, batch_size=2)
    with pytest.raises(PulseInputError) as err:
        pj.simulate(scores, cfg, "ucbe", reps=1, cost=cost)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_nan_cell_cost_is_refused_with_its_row_and_column_but_ignored_where_the_score_is_missing():
    scores = (np.random.default_rng(0).random((4, 10)) < 0.5).astype(np.float32)
    cells = np.ones((4, 10))
    cells[2, 7] = np.nan
    cfg = pj.BanditConfig(n_models=4, n_examples=10, budget=40, batch_size=2)
    with pytest.raises(PulseInputError, match=r"row 2, column 7 is nan"):
        pj.simulate(scores, cfg, "ucbe", reps=1, cost=cells)
    scores[2, 7] = np.nan
    res = pj.simulate(scores, cfg, "ucbe", reps=1, cost=cells)
    assert np.isfinite(res.money).all()


# ----------------------------------------------------------------------------- files, command line, live


def _write_matrix(folder, scores, cost):
    m, n = scores.shape
    header = "model," + ",".join(f"q{j}" for j in range(n)) + "\n"
    (folder / "scores.csv").write_text(header + "".join(
        f"m{i}," + ",".join(str(int(v)) for v in scores[i]) + "\n" for i in range(m)))
    (folder / "cost.csv").write_text("model,cost\n" + "".join(f"m{i},{cost[i]}\n" for i in range(m)))
    return [f"m{i}" for i in range(m)], [f"q{j}" for j in range(n)]


@pytest.mark.parametrize("text, needle", [
    ("model,cost\nm0,1\nm1,-2\n", "cost.csv: line 3, column cost: a cost must be a finite number >= 0, got -2"),
    ("model,cost\nm0,1\nm1,nan\n", "line 3, column cost: a cost must be a finite number >= 0, got nan"),
    ("model,cost\nm0,1\nm1,cheap\n", "line 3, column cost: 'cheap' is not a number"),
    ("model,cost\nm0,1\n", "no cost for 1 candidate(s), e.g. 'm1'"),
    ("model,cost\nm0,1\nm1,2\nm9,3\n", "line 4: 'm9' is not a candidate"),
    ("model,cost\nm0,1\nm0,2\nm1,2\n", "line 3: model 'm0' is priced twice (also line 2)"),
    ("model,q0,q1\nm0,1,1\nm1,1,1\n", "no column for example 'q2'"),
    ("model,q0,q1,q2\nm0,1,1,1\nm1,1,,1\n", "line 3, column q1: no cost for a cell 'm1' has a score for"),
    ("cost\n", "expected a header 'model,cost'"),
])
def test_bad_cost_files_are_refused_in_one_line(tmp_path, text, needle):
    from pulse_jax.fileio.costs import load_costs

    (tmp_path / "cost.csv").write_text(text)
    with pytest.raises(PulseInputError) as err:
        load_costs(tmp_path / "cost.csv", ["m0", "m1"], ["q0", "q1", "q2"], np.zeros((2, 3)))
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_cost_matrix_file_is_read_by_example_id(tmp_path):
    from pulse_jax.fileio.costs import load_costs

    (tmp_path / "cost.csv").write_text("model,q2,q0,q1\nm1,3,1,2\nm0,6,4,5\n")
    scores = np.array([[1.0, 0.0, np.nan], [1.0, 1.0, 0.0]])
    np.testing.assert_array_equal(load_costs(tmp_path / "cost.csv", ["m0", "m1"], ["q0", "q1", "q2"], scores),
                                  [[4, 5, 6], [1, 2, 3]])


def test_simulate_with_a_cost_file_certifies_the_front_and_writes_the_cost_plot(tmp_path, capsys):
    from pulse_jax import cli

    scores, cost = _cheap_matrix()
    _write_matrix(tmp_path, scores, cost)
    base = ["simulate", "--scores", str(tmp_path / "scores.csv"), "--method", "ucbe", "--reps", "8", "--budget", "2400",
            "--quiet"]
    assert cli.main(base + ["--front", "--out", str(tmp_path / "res")]) == 2
    assert "--front ranks the models by cost: pass --cost FILE" in capsys.readouterr().err
    assert cli.main(base + ["--front", "0.02", "--cost", str(tmp_path / "cost.csv"), "--out", str(tmp_path / "res")]) == 0
    out = capsys.readouterr()
    assert "--front samples by focus" in out.err and "money (median)" in out.out
    assert (tmp_path / "res" / "cost_accuracy.png").stat().st_size > 10_000
    listed = __import__("json").loads((tmp_path / "res" / "provenance.json").read_text())["files"]
    assert "cost_accuracy.png" in listed          # --force replaces it, and only what provenance lists
    summary = __import__("json").loads((tmp_path / "res" / "summary.json").read_text())
    money = summary["methods"]["ucbe"]["money"]
    assert money["cost_per_cell"] == pytest.approx(list(cost)) and money["to_claim"]["reached_fraction"] == 1.0


def test_select_certifies_the_cheapest_good_enough_model_with_per_call_prices(tmp_path, monkeypatch, capsys):
    """A live selection with a price table: the report names the model and the spend, the plot is written."""
    from pulse_jax import cli

    monkeypatch.chdir(tmp_path)
    scores, cost = _cheap_matrix()
    np.save(tmp_path / "scores.npy", scores)
    models = [f"m{i}" for i in range(8)]
    (tmp_path / "models.txt").write_text("\n".join(models) + "\n")
    (tmp_path / "cheap_scorer.py").write_text(
        "import numpy as np\nS = np.load('scores.npy')\n"
        "def score(model, ids):\n    return S[int(model[1:]), [int(i) for i in ids]].tolist()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    prices = [arg for i in range(8) for arg in ("--price", f"m{i}={cost[i] / 1000:g}")]
    argv = ["select", "--models", "models.txt", "--examples", "300", "--budget", "2400", "--batch-size", "8",
            "--method", "ucbe", "--evaluate", "cheap_scorer:score", "--log", "run.db", "--quiet", *prices]
    assert cli.main(argv[:-16] + ["--cheapest", "0.02"]) == 2
    assert "--cheapest ranks the models by price: give --price MODEL=DOLLARS (per call) or MODEL=IN/OUT" in capsys.readouterr().err
    assert cli.main(argv + ["--cheapest", "0.05"]) == 0
    report = __import__("json").loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["stop"] == "cheapest_within" and report["stopped"]
    claimed = report["claimed"][0]
    truth = _truth_cheapest(scores.mean(1), cost, 0.05)
    assert cost[models.index(claimed)] == cost[truth]
    assert claimed in report["certificate"] and report["spend"]["usd"] > 0
    assert (tmp_path / "run_report" / "cost_accuracy.png").is_file()


def test_a_cost_certificate_without_costs_is_refused_by_the_selector():
    from pulse_jax import live

    with pytest.raises(PulseInputError, match="ranks the models by cost: pass cost="):
        live.Selector(["a", "b", "c"], 20, 60, method="ucbe", stop=pj.cheapest_within(0.01))
    with pytest.raises(PulseInputError, match="cost of 'b' must be a finite number > 0"):
        live.Selector(["a", "b", "c"], 20, 60, method="ucbe", cost=[1.0, 0.0, 2.0])


def test_per_call_prices_parse_beside_token_prices():
    from pulse_jax.live import money

    prices = money.parse_prices(["a=0.002", "*=1/4"], ["a", "b"], cost_per_call=0.001)
    assert prices["a"].per_call == pytest.approx(0.003) and not prices["a"].per_token
    assert prices["b"].input_per_million == 1 and prices["b"].per_call == 0.001


def test_the_live_selector_with_costs_makes_the_simulations_choices():
    """Ask/tell with costs and the front certificate (its focus seen by the asking kernel) pulls what
    simulate pulls on the same key, step for step, and stops where it stops."""
    from pulse_jax import live

    scores, cost = _cheap_matrix()
    m, n = scores.shape
    sel = live.Selector([f"m{i}" for i in range(m)], n, 1600, method="ucbe", batch_size=8, stop=pj.cost_front(0.05),
                        seed=3, cost=cost, concurrency=1, **as_simulated(rule="focus", params={"delta": 0.3}))
    chosen = []
    while (request := sel.ask()) is not None:
        sel.tell(request, scores[request.model_index, list(request.example_index)])
        if request.step:
            chosen.append(request.model_index)
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=1600, batch_size=8)
    sim = pj.simulate(scores, config, pj.Plugins("ucbe", "focus", pj.cost_front(0.05)), reps=1, seed=3, cost=cost, params={"delta": 0.3})
    np.testing.assert_array_equal(chosen, sim.chosen[0, :len(chosen)])
    assert sel.result().stopped == bool(sim.stopped[0])


def test_money_metrics_against_a_numpy_reference():
    """money_to_certify / money_to_claim / money_to_target / paired_money_savings recomputed by hand from
    the per-step curves (the same repetitions resampled, the same seed)."""
    from pulse_jax.analysis import spending

    scores, cost = _cheap_matrix()
    m, n = scores.shape
    cfg = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8)
    plugins = pj.Plugins("ucbe", "top_two_interval", "certified")
    res = pj.simulate(scores, cfg, plugins, reps=12, seed=5, cost=cost, params={"delta": 0.3})
    at_cert = np.array([res.money[r, np.searchsorted(res.spent[r], res.certified_spent[r])] if res.certified_spent[r] >= 0
                        else np.inf for r in range(res.reps)])
    np.testing.assert_allclose(spending.money_when_certified(res), at_cert)
    np.testing.assert_allclose(spending.money_when_stopped(res), np.where(res.stopped, res.money[:, -1], np.inf))
    got = spending.money_to_certify(res, n_boot=300, seed=1)
    boot = np.median(at_cert[np.random.default_rng(1).integers(0, res.reps, (300, res.reps))], axis=1)
    assert got["median"] == pytest.approx(np.median(at_cert))
    assert (got["low"], got["high"]) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])))
    amounts = np.linspace(res.money[:, 0].min(), res.money[:, -1].max(), 50)
    best = np.array([[res.best[r, np.searchsorted(res.money[r], a, side="right") - 1] for a in amounts]
                     for r in range(res.reps)])
    np.testing.assert_array_equal(spending.best_at_money(res, amounts), best)
    accuracy = res.is_best(best).mean(0)
    target = spending.money_to_target(res, 0.5, amounts, n_boot=50)
    assert target["money"] == pytest.approx(metrics_first(accuracy, amounts, 0.5))
    blind = pj.simulate(scores, cfg, plugins, reps=12, seed=5, params={"delta": 0.3})
    blind.money = (blind.n_obs * cost).sum(1)[:, None] * np.ones_like(blind.money)   # final money by hand
    saved = spending.paired_money_savings(res, blind, n_boot=200, seed=2)
    a, b = res.money[:, -1], blind.money[:, -1]
    assert saved["savings_pct"] == pytest.approx(100 * (1 - np.median(a) / np.median(b)))
    assert saved["low"] <= saved["savings_pct"] <= saved["high"]


def metrics_first(accuracy, amounts, target):
    ok = accuracy >= target
    if not ok[-1]:
        return float("nan")
    below = np.nonzero(~ok)[0]
    return float(amounts[0 if len(below) == 0 else below[-1] + 1])


def test_each_sweep_point_counts_the_money_simulate_counts():
    scores, cost = _cheap_matrix()
    cfg = pj.BanditConfig(n_models=8, n_examples=300, budget=800, batch_size=8)
    plugins = pj.Plugins("ucbe", "top_two_interval", "certified")
    swept = pj.sweep(scores, cfg, plugins, {"delta": [0.1, 0.3]}, reps=3, seed=4, cost=cost)
    for point, result in zip((0.1, 0.3), swept.results):
        alone = pj.simulate(scores, cfg, plugins, reps=3, seed=4, cost=cost, params={"delta": point})
        np.testing.assert_allclose(result.money, alone.money, rtol=1e-6)
        np.testing.assert_allclose(result.cost, cost)


def test_the_benchmark_core_is_the_fronts_tight_relations():
    """``bench_cost.py``'s ``core`` part runs the front on its tight relations alone: each model with the
    best model at most as expensive when their gap lies within ``TIGHT`` of epsilon (either side)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "statistics" / "bench_cost.py"
    spec = importlib.util.spec_from_file_location("bench_cost", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    mu = np.array([0.5, 0.515, 0.7, 0.6, 0.69])
    cost = np.array([1.0, 2.0, 3.0, 4.0, 3.0])
    # 1 vs 0: 0.5 - 0.515 - 0.01 = -0.025 (tight, on the front); 3 vs 2: 0.7 - 0.6 - 0.01 = 0.09 (not);
    # 4 vs 2 at the same price: 0.7 - 0.69 - 0.01 = 0 (tight); 2 vs 4: -0.02 (tight)
    assert bench.tight_core(mu, cost) == [0, 1, 2, 4]
    assert bench.tight_core(mu[:4], cost[:4]) == [0, 1]
