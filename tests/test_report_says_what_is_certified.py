"""The report says only what the run certified: the tie groups' line is true as written, and the figure's
legend names the intervals it draws."""
import numpy as np
import pytest

from pulse_jax.analysis.plotting import interval_label
from pulse_jax.live.report import Report
from pulse_jax.live.report_files import cost_title
from pulse_jax.stopping import groups


def _report(est, low, high, simultaneous=True, names=None):
    names = names or tuple(f"m{i}" for i in range(len(est)))
    g = tuple(tuple(names[i] for i in gg) for gg in groups(est, low, high))
    n = len(est)
    return Report("pulse", 0, names, np.asarray(est), np.asarray(low), np.asarray(high), np.ones(n), np.ones(n), 10,
                  100, 0.05, names[0], False, (), {}, simultaneous=simultaneous, groups=g)


def test_a_barely_evaluated_model_is_said_apart_not_placed_above_a_fully_evaluated_one():
    """The docs' case: candidate-002 exact at 0.677 (every cell) ranks 2nd; candidate-007 at 0.375 with
    [0, 1] after one batch sits in the leader's group. The line must not put 007 above 002."""
    names = ("candidate-001", "candidate-002", "candidate-007", "candidate-004")
    r = _report([0.80, 0.677, 0.375, 0.60], [0.75, 0.677, 0.0, 0.55], [0.85, 0.677, 1.0, 0.65], names=names)
    line = r._groups_line()
    assert "candidate-001 > candidate-002 > candidate-004" in line
    assert "too little evaluated to place: candidate-007 [0.000, 1.000]" in line
    assert "} >" not in line and "{" not in line                 # no group-over-group claim
    assert "Nothing else about the order is certified" in line


@pytest.mark.parametrize("seed", range(20))
def test_every_order_the_line_states_is_certified_by_the_intervals(seed):
    rng = np.random.default_rng(seed)
    m = 8
    est = rng.uniform(0.2, 0.8, m)
    width = rng.uniform(0.0, 0.5, m)
    low, high = np.clip(est - width, 0, 1), np.clip(est + width, 0, 1)
    r = _report(est, low, high)
    index = {name: i for i, name in enumerate(r.models)}
    heads = [g[0] for g in r.groups]
    assert r._groups_line().count(" > ") == len(heads) - 1
    for k, head in enumerate(heads):          # each head is above every model of the later groups
        for later in r.groups[k + 1:]:
            for other in later:
                assert low[index[head]] > high[index[other]]


def test_the_figure_legend_names_the_intervals_drawn():
    simultaneous = _report([0.6, 0.4], [0.5, 0.3], [0.7, 0.5])
    assert "simultaneous, every look" in interval_label(simultaneous)
    certification = _report([0.6, 0.4], [0.5, 0.3], [0.7, 0.5], simultaneous=False)
    label = interval_label(certification)
    assert "simultaneous" not in label and "not all at once" in label
    assert "At certification levels one thing is certified" in _report(
        [0.6, 0.5, 0.4], [0.55, 0.2, 0.35], [0.65, 0.9, 0.45], simultaneous=False)._groups_line()


@pytest.mark.parametrize("m", [40, 200])
def test_cost_accuracy_names_fit_without_overlap_and_the_claimed_ones_are_always_named(m):
    import matplotlib.pyplot as plt

    from pulse_jax.analysis import plotting

    rng = np.random.default_rng(m)
    cost = 10 ** rng.uniform(-4, -1, m)
    cost[: m // 5] = 0.002                           # a block of models at one price
    est = rng.uniform(0.3, 0.8, m)
    claimed = np.zeros(m)
    claimed[[1, m // 2, m - 1]] = 1.0
    names = [f"candidate-{i:03d}" for i in range(m)]
    fig, ax = plt.subplots(figsize=(7.2, 4.8), dpi=120)
    ax.plot(cost, est, "o")
    ax.set_xscale("log")
    plotting._labels(fig, ax, cost, est, names, claimed)
    renderer = fig.canvas.get_renderer()
    texts = [t for t in ax.texts]
    boxes = [t.get_window_extent(renderer) for t in texts]
    shown = {t.get_text() for t in texts}
    assert {names[1], names[m // 2], names[m - 1]} <= shown
    assert 10 <= len(texts) < m
    for k, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[k + 1:]), texts[k].get_text()
    plt.close(fig)


def test_the_cost_report_has_prices_spend_and_a_title_that_says_the_question():
    from types import SimpleNamespace

    r = _report([0.6, 0.5], [0.55, 0.45], [0.65, 0.55])
    r = __import__("dataclasses").replace(r, prices=(0.05, 0.01), spent_by_model=(1.25, 0.5), stop="cheapest_within",
                                           claimed=("m1",), spend={"usd": 1.75})
    table = r.to_markdown()
    assert "| price per cell | spent |" in table and "| $0.05 | $1.25 |" in table
    assert r.to_dict()["ranking"][0]["spent_usd"] == 1.25
    selector = SimpleNamespace(params=SimpleNamespace(stop=SimpleNamespace(epsilon=0.02)))
    title = cost_title(r, selector)
    assert title.startswith("the cheapest model within epsilon 0.02 of the best") and "$1.75 spent" in title


def test_a_price_times_a_count_checks_against_the_total_printed_beside_it():
    """The cost line printed $0.0004 x 600 = $0.2104 (the price rounded to 4 decimals): prices below a
    dollar now keep four significant digits, so the product of what is printed checks."""
    from pulse_jax.live.money import money

    price = 0.00035067
    assert money(price) == "$0.0003507" and money(600 * price) == "$0.2104"
    assert abs(600 * float(money(price)[1:]) - float(money(600 * price)[1:])) < 1e-4
    assert [money(x) for x in (0, 0.05, 0.1, 1.5, 1234.5, 0.000012345, None)] == \
        ["$0.00", "$0.05", "$0.10", "$1.50", "$1,234.50", "$0.00001234", "n/a"]
