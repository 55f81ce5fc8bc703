"""What a new user trips on in the second hour: hints that name the fix, notes said once, defaults that
are the command's own."""
import sys

import numpy as np
import pytest

from conftest import cli_fails
from pulse_jax import cli
from pulse_jax.errors import PulseNote
from pulse_jax.fileio import data


def _matrix_csv(path, scores, prefix="m", example="e"):
    lines = ["model," + ",".join(f"{example}{j}" for j in range(scores.shape[1]))]
    lines += [f"{prefix}{i}," + ",".join(f"{x:g}" for x in row) for i, row in enumerate(scores)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("header", ["model,example,score", "model,doc_id,acc", "name,sample_id,correct"])
def test_a_long_table_where_a_matrix_is_read_names_the_import_command(tmp_path, capsys, header):
    """A long table given to --scores (or --train) said "transposed?"; the line now gives the command that
    converts it, with the columns it needs."""
    model, example, score = header.split(",")
    table = tmp_path / "long.csv"
    table.write_text(header + "\na,1,1\na,2,0\nb,1,1\nb,2,1\n")
    err = cli_fails(["simulate", "--scores", str(table), "--out", str(tmp_path / "o")], capsys,
                    f"pulse-jax import long {table} --out matrix.csv")
    for option, name, default in (("--model-column", model, "model"), ("--example-column", example, "example"),
                                  ("--score-column", score, "score")):
        assert (f"{option} {name}" in err) == (name != default), err
    assert "transposed" not in err


def test_simulate_without_scores_points_to_the_built_in_benchmark(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["simulate", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1
    assert ("required: --scores; give your candidates' score matrix (CSV or NPZ), or run `pulse-jax demo` for the "
            "built-in benchmark") in err


def test_simulate_help_gives_the_defaults_simulate_uses(capsys):
    """``simulate`` always reads a file: its help said "default: 16 on the built-in benchmark, 16 on a file"."""
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "built-in benchmark, " not in text and "on a file" not in text
    assert "(default: 16)" in text        # --batch-size, the file default


def test_the_candidates_own_scores_as_the_history_are_said(tmp_path):
    """The candidates' own full scores given as --train ran without a word (a leaked benchmark)."""
    rng = np.random.default_rng(0)
    scores = (rng.random((4, 30)) < 0.6).astype(float)
    cand = data.load(_matrix_csv(tmp_path / "c.csv", scores))
    with pytest.warns(PulseNote, match=r"the history holds 4 of the candidates \(m0, m1, m2 and 1 more\), 4 with "
                                       r"exactly the candidates' scores: .* leak the answer"):
        data.align_train(cand, data.load(_matrix_csv(tmp_path / "t.csv", scores)))
    other = data.load(_matrix_csv(tmp_path / "h.csv", (rng.random((5, 30)) < 0.5).astype(float), prefix="h"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PulseNote)
        data.align_train(cand, other)                 # a history of other models: nothing to say


def test_select_says_the_capped_default_rank_once(tmp_path, capsys):
    """select checked the history early and again when it made the selector: the note on the default rank
    was printed twice, and the training file parsed twice."""
    rng = np.random.default_rng(1)
    scores = (rng.random((4, 40)) < np.linspace(0.3, 0.8, 4)[:, None]).astype(float)
    _matrix_csv(tmp_path / "train.csv", (rng.random((6, 40)) < 0.5).astype(float), prefix="h", example="")
    (tmp_path / "models.txt").write_text("\n".join(f"m{i}" for i in range(4)) + "\n")
    np.save(tmp_path / "s.npy", scores)
    (tmp_path / "sixth_scorer.py").write_text(
        f"import numpy as np\nS = np.load({str(tmp_path / 's.npy')!r})\n"
        "def score(model, ids):\n    return S[int(model[1:]), [int(i) for i in ids]].tolist()\n")
    loads = []
    original = data.load
    sys.path.insert(0, str(tmp_path))
    try:
        data.load = lambda path, *a, **k: loads.append(str(path)) or original(path, *a, **k)
        assert cli.main(["select", "--models", str(tmp_path / "models.txt"), "--examples", "40", "--budget", "64",
                         "--batch-size", "4", "--method", "pulse", "--train", str(tmp_path / "train.csv"),
                         "--evaluate", "sixth_scorer:score", "--stop", "budget", "--quiet",
                         "--log", str(tmp_path / "run.db")]) == 0
    finally:
        data.load = original
        sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert err.count("(the default) needs at least 16 historical models") == 1, err
    assert loads.count(str(tmp_path / "train.csv")) == 1, loads


@pytest.mark.parametrize("bounds", ["all", "certification"])
def test_report_json_names_the_certified_pairs(tmp_path, bounds):
    """``groups_ordered_with_guarantee: true`` read as "every member above every later group", which held
    in half the reports: report.json now lists the pairs it certifies, all of which hold together, and each
    one's lower bound clears the other's upper bound."""
    from pulse_jax.live import Selector, run

    rng = np.random.default_rng(3)
    means = np.array([0.85, 0.6, 0.55, 0.3, 0.28])
    scores = (rng.random((5, 300)) < means[:, None]).astype(float)
    models = [f"m{i}" for i in range(5)]
    selector = Selector(models, 300, 1500, method="ucbe", batch_size=10, bounds=bounds, stop="budget", seed=0)
    report = run(lambda model, ids: scores[models.index(model), ids].tolist(), selector)
    out = report.to_dict()
    assert "groups_ordered_with_guarantee" not in out
    assert out["group_heads_certified_above_later_groups"] is (bounds == "all")
    pairs = out["certified_pairs"]
    index = {m: i for i, m in enumerate(report.models)}
    assert pairs and all(report.low[index[a]] > report.high[index[b]] for a, b in pairs)
    if bounds == "all":     # every separated pair
        assert len(pairs) == sum(report.low[i] > report.high[j] for i in range(5) for j in range(5))
        assert ["m1", "m3"] in pairs
    else:                   # the certified best above each other model, and nothing else
        assert report.separated and sorted(pairs) == sorted(["m0", m] for m in models[1:])


def _report(n_tied: int, **fields):
    from pulse_jax.live.report import Report

    m = n_tied + 1
    names = tuple(f"model-{i:02d}" for i in range(m))
    est = np.linspace(0.7, 0.6, m)
    return Report("pulse", 0, names, est, est - 0.2, est + 0.2, np.full(m, 8), np.ones(m), 100 * m, 100 * m, 0.05,
                  names[0], False, names[1:], {}, stop="certified", finished=True,
                  certificate="no model is certified best yet", **fields)


def test_a_run_that_ends_before_its_stop_says_what_ended_it():
    """A money-budget stop read "certified (finished): no model is certified best yet"."""
    money = _report(2, spend={"cells": 300, "usd": 4.9, "stopped_by_budget": True}).to_markdown()
    assert "Stopping rule `certified` (not reached: the money budget ran out first): no model is certified" in money
    cells = _report(2).to_markdown()
    assert "Stopping rule `certified` (not reached: the cell budget ran out first)" in cells
    assert "(finished)" not in money + cells


def test_a_long_tie_list_goes_below_the_table():
    """38 "tied with the leader" names made one unreadable opening line."""
    text = _report(38).to_markdown()
    opening = text.splitlines()[2]
    assert "tied with the leader: model-01, model-02, model-03, model-04, model-05 and 33 more (all listed below " \
           "the table)" in opening
    last = text.strip().splitlines()[-1]
    assert last.startswith("Tied with the leader model-00 (not separated from it, 38): model-01, ") and "model-38" in last
    short = _report(3).to_markdown()
    assert "tied with the leader: model-01, model-02, model-03 (" in short and "below the table" not in short


def test_notes_under_a_host_program_are_plain_lines(caplog):
    """Under ``inspect eval`` a note showed as a Python warning with a source path: select_best logs each
    as one ``note:`` record of the ``pulse_jax`` logger (the host shows its log records as lines), and
    passes other warnings on."""
    import logging
    import warnings

    from pulse_jax.errors import note, notes_as_lines

    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as passed, caplog.at_level(logging.WARNING, logger="pulse_jax"):
        warnings.simplefilter("always")
        with notes_as_lines():
            note("--rank 16 (the default) needs at least 16 historical models")
            warnings.warn("something else", DeprecationWarning)
    assert [(r.name, r.getMessage()) for r in caplog.records] == \
        [("pulse_jax", "note: --rank 16 (the default) needs at least 16 historical models")]
    assert [w.category for w in passed] == [DeprecationWarning]
    assert warnings.filters == before


@pytest.mark.parametrize("given", [None, "0"])
def test_the_command_line_turns_xla_s_log_lines_off_unless_told(given):
    """XLA's "Very slow compile? If you want to file a bug ..." banner appeared mid-run and looked like an
    error: the CLI sets TF_CPP_MIN_LOG_LEVEL=3 before JAX starts, unless the user set it."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if given is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = given
    code = ("import os, sys\nfrom pulse_jax.cli import app\nassert 'jax' not in sys.modules\n"
            "app.main(['demo', '--reps', '0'])\nprint(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (given or "3"), out.stderr


def _kept_figure(monkeypatch):
    """Capture the figure a plotting function saves (instead of writing it)."""
    from pulse_jax.analysis import plotting

    kept = {}

    def keep(fig, path):
        fig.canvas.draw()
        kept["fig"] = fig
        return path

    monkeypatch.setattr(plotting, "_save", keep)
    return kept


def test_the_estimates_legend_covers_no_model(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from pulse_jax.analysis import plotting

    kept = _kept_figure(monkeypatch)
    names = tuple(f"candidate-{i:03d}" for i in range(40))
    est = np.linspace(0.72, 0.58, 40)
    report = SimpleNamespace(models=names, ranking=list(names), estimates=est, low=est - 0.1, high=est + 0.05,
                             method="pulse_hedged", spent=20000, budget=40000, leader=names[0], delta=0.05,
                             simultaneous=False)
    plotting.estimates_with_intervals(report, tmp_path / "e.png")
    (ax,) = kept["fig"].axes
    legend = ax.get_legend().get_window_extent()
    assert legend.y0 >= ax.get_window_extent().y1 - 1          # above the axes, not over the last rows


def test_models_of_one_price_each_get_their_name_on_the_cost_plot(monkeypatch, tmp_path):
    """38 models at one price were stacked on one line, and 12 of them named; each now has its own point
    and its name, no two names overlapping."""
    from pulse_jax.analysis import plotting

    kept = _kept_figure(monkeypatch)
    rng = np.random.default_rng(0)
    est = np.sort(rng.uniform(0.58, 0.70, 40))[::-1]
    cost = np.full(40, 0.001)
    cost[[3, 7]] = [0.01, 0.02]
    names = [f"candidate-{i:03d}" for i in range(40)]
    plotting.cost_accuracy(tmp_path / "c.png", cost, est, names, low=est - 0.05, high=est + 0.05,
                           claimed=np.arange(40) == 7, title="the cheapest model within epsilon 0.01 of the best: "
                           "22,312 cells, $50.02 spent; claimed: " + ", ".join(names[:12]), unit="$")
    fig = kept["fig"]
    (ax,) = fig.axes
    texts = [t for t in ax.texts if t.get_text().startswith("candidate-")]
    assert sorted(t.get_text() for t in texts) == sorted(names)
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t) for t in texts]          # the name itself, not its leader line
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    xs = ax.lines[0].get_xdata()
    assert len(set(np.round(xs, 12))) == 40                     # one point each, none stacked
    title = ax.title.get_window_extent()
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1          # a long title wraps inside the figure
