"""A best-model certificate's levels in a live selection: most of delta to the upper bounds and bets tuned
to the running gap by default (`pulse_jax.choices.claim_split`, `pulse_jax.choices.claim_gap_horizon`), every
other claim and every choice the caller names left as given. Their validity is
tests/test_confidence.py's (any split, any predictable horizon: wrong certificates at most delta)."""
import numpy as np
import pytest

from pulse_jax import choices, registry, synthetic
from pulse_jax.live import Plan, Selector
from pulse_jax.stats import factorization
from pulse_jax.stopping import StoppingRule


def _stop(name):
    return registry.builtin("stopping rule", name)


CERTIFICATION = {"delta": 0.05, "cs_simultaneous": 0.0}


@pytest.mark.parametrize("name", ["certified", "epsilon_good", "tie_group", "budget"])
def test_a_best_model_claim_gives_most_of_delta_to_the_upper_bounds(name):
    """Certificates about the best model, and the fixed budget, which claims nothing."""
    out = choices.claim_split(CERTIFICATION, _stop(name), set())
    assert out["cs_upper_share"] == choices.CLAIM_UPPER_SHARE == 0.95
    assert choices.claim_gap_horizon(_stop(name), CERTIFICATION, None) == choices.CLAIM_GAP_HORIZON == 0.5


def _worst_model(inputs, params):
    return False


@pytest.mark.parametrize("stop", [_stop("top_k"), _stop("cost_front"),
                                  StoppingRule("worst_model", _worst_model, needs_interval=True)])
def test_other_claims_keep_the_symmetric_split_and_anytime_bets(stop):
    """A top-k set, a cost certificate and a plug-in's claim (declaring nothing: every model's upper bound)
    rest on more than one model's upper bound. (The fixed budget, which claims nothing, takes a best-model
    claim's levels: a run that spends its budget may be resumed with a certificate.)"""
    assert "cs_upper_share" not in choices.claim_split(CERTIFICATION, stop, set())
    assert choices.claim_gap_horizon(stop, CERTIFICATION, None) == 0.0


def test_every_bound_at_once_and_the_callers_own_choices_are_kept():
    certified = _stop("certified")
    every = {"delta": 0.05, "cs_simultaneous": 1.0}
    assert "cs_upper_share" not in choices.claim_split(every, certified, set())
    assert choices.claim_gap_horizon(certified, every, None) == 0.0
    given = {**CERTIFICATION, "cs_upper_share": 0.6}
    assert choices.claim_split(given, certified, {"cs_upper_share"})["cs_upper_share"] == 0.6
    assert choices.claim_gap_horizon(certified, CERTIFICATION, 0.0) == 0.0
    assert choices.claim_gap_horizon(certified, CERTIFICATION, 2.0) == 2.0


@pytest.fixture(scope="module")
def bench():
    b = synthetic.make_benchmark(seed=0, n_models=6, n_examples=120, n_train=40)
    return b, factorization.fit_example_embeddings(b.train, rank=4)


def _selector(bench, **kw):
    b, V = bench
    m, n = b.scores.shape
    return Selector(b.models, n, m * n, batch_size=8, V=V, **kw)


def test_a_selector_certifies_the_best_with_the_claims_levels_by_default(bench):
    sel = _selector(bench)
    assert sel.config.gap_horizon == 0.5
    assert float(sel.params.cs_upper_share) == pytest.approx(0.95)
    assert float(sel.params.cs_simultaneous) == 0.0


def test_a_selector_keeps_what_the_caller_names(bench):
    sel = _selector(bench, params={"cs_upper_share": 0.6}, gap_horizon=0.0)
    assert sel.config.gap_horizon == 0.0
    assert float(sel.params.cs_upper_share) == pytest.approx(0.6)
    every = _selector(bench, bounds="all")
    assert every.config.gap_horizon == 0.0 and float(every.params.cs_upper_share) == 0.5
    top = _selector(bench, stop=registry.builtin_top_k(2))
    assert top.config.gap_horizon == 0.0 and float(top.params.cs_upper_share) == 0.5


def test_a_plans_numbers_carry_the_claims_split_unless_a_param_names_it(tmp_path):
    plan = Plan(log=str(tmp_path / "run.db"), budget=400)
    assert plan.numbers(plan.plugins(), 6)["cs_upper_share"] == 0.95
    named = Plan(log=str(tmp_path / "run.db"), budget=400, param=(("cs_upper_share", 0.5),))
    assert named.numbers(named.plugins(), 6)["cs_upper_share"] == 0.5
    top = Plan(log=str(tmp_path / "run.db"), budget=400, top_k=2)
    assert "cs_upper_share" not in top.numbers(top.plugins(), 6)
    every = Plan(log=str(tmp_path / "run.db"), budget=400, bounds="all")
    assert "cs_upper_share" not in every.numbers(every.plugins(), 6)


@pytest.mark.parametrize("value", [-0.5, float("nan"), "half", True])
def test_a_bad_gap_horizon_is_refused_in_one_line(tmp_path, value):
    with pytest.raises(Exception, match="gap_horizon must be a number >= 0"):
        Plan(log=str(tmp_path / "run.db"), budget=400, gap_horizon=value)


def test_the_command_line_takes_gap_horizon(tmp_path):
    from pulse_jax.cli.app import build_parser

    args = build_parser().parse_args(["select", "--models", "m.txt", "--examples", "10", "--budget", "100",
                                      "--evaluate", "x:y", "--log", str(tmp_path / "r.db"), "--gap-horizon", "0"])
    assert args.gap_horizon == 0.0
    assert np.isfinite(args.gap_horizon)


def test_a_log_started_with_other_levels_is_refused_naming_how_to_continue_it(bench, tmp_path):
    """A log keeps the levels it was started with: resuming it with other ones is refused in one line that
    names the option giving the log's own, and that option continues it."""
    from pulse_jax.errors import PulseInputError

    b, V = bench
    log = tmp_path / "run.db"
    first = _selector(bench, log=log, gap_horizon=0.0, params={"cs_upper_share": 0.5})
    first.tell(request := first.ask(), b.scores[request.model_index, list(request.example_index)])
    first.close()
    with pytest.raises(PulseInputError, match=r"gap_horizon is 0.0 in the log, 0.5 here; give --gap-horizon 0.0"):
        _selector(bench, log=log)
    with pytest.raises(PulseInputError, match=r"cs_upper_share is 0.5 in the log, 0.95.* give --param cs_upper_share=0.5"):
        _selector(bench, log=log, gap_horizon=0.0)
    again = _selector(bench, log=log, gap_horizon=0.0, params={"cs_upper_share": 0.5})
    assert again.resumed
    again.close()
