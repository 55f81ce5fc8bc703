"""The first hour's rough edges: one-line errors that name the command, files and names in messages,
no folder created by mistake, a method without an interval under the live default rule."""
import pytest

from pulse_jax import cli, stand_in
from pulse_jax.cli import stand_in as stand_in_cli


@pytest.mark.parametrize("argv, needle", [
    (["select", "--budget", "x"], "pulse-jax: error: select: argument --budget: invalid int value: 'x' (see "
                                  "pulse-jax select --help)"),
    (["demo", "--epsilon", "0.1", "--top-k", "3"], "demo: argument --top-k: not allowed with argument --epsilon"),
    (["log", "export", "run.db", "--out", "x"], "pulse-jax: error: log export: unrecognized arguments: --out x (see "
                                                "pulse-jax log export --help)"),
])
def test_argument_errors_are_one_line_naming_the_command(capsys, argv, needle):
    try:
        code = cli.main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_messages_name_the_file_and_the_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["log", "import", "nosuch.jsonl", "x.db"]) == 2
    assert "nosuch.jsonl: no such file" in capsys.readouterr().err
    (tmp_path / "models.txt").write_text("a\nb\na\nc\nb\n")
    assert cli.main(["select", "--models", "models.txt", "--examples", "10", "--budget", "50", "--evaluate",
                     "pulse_jax.stand_in:score", "--log", "run.db"]) == 2
    assert "--models models.txt: 2 name(s) appear more than once: 'a', 'b'" in capsys.readouterr().err
    (tmp_path / "models.txt").write_text("a\nb\n")
    assert cli.main(["select", "--models", "models.txt", "--examples", "10", "--budget", "50", "--method", "ucbe",
                     "--evaluate", "pulse_jax.stand_in:score", "--log", str(tmp_path / "nosuch" / "run.db")]) == 2
    assert "its folder" in capsys.readouterr().err and not (tmp_path / "nosuch").exists()


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_a_method_without_an_interval_selects_with_the_index_rule(tmp_path, monkeypatch, capsys):
    """``select --method naive --train ...`` under the default rule (Top-Two needs an interval): the index
    rule instead, with a note; an explicit --rule still has to fit."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:4]) + "\n")
    assert stand_in_cli.main(["train", "history.csv"]) == 0
    argv = ["select", "--models", "models.txt", "--examples", "1000", "--budget", "160", "--batch-size", "16",
            "--evaluate", "pulse_jax.stand_in:score", "--train", "history.csv", "--rank", "4", "--method", "naive",
            "--quiet", "--log", "run.db"]
    assert cli.main(argv) == 0
    assert "has no confidence interval, so it samples by the index rule ucbe" in capsys.readouterr().err
    assert cli.main(argv[:-1] + ["other.db", "--rule", "lucb"]) == 2


def test_without_a_terminal_long_work_says_how_far_it_is(tmp_path, monkeypatch, capsys):
    """stderr to a file or a pipe: plain lines (no carriage returns) when a method starts and when it is done,
    and at most one a minute between (the period is set to 0 here, so every chunk reports)."""
    monkeypatch.setattr(cli.output, "PROGRESS_LINE_EVERY", 0.0)
    assert cli.main(["demo", "--reps", "4", "--chunk-size", "2", "--method", "ucbe", "--out", str(tmp_path / "d")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "  ucbe: compiling, then running" in err and "  ucbe: 2/4 repetitions" in err and "  ucbe: 4/4 repetitions" \
        in err, err
    assert cli.main(["demo", "--reps", "4", "--method", "ucbe", "--quiet", "--out", str(tmp_path / "e")]) == 0
    assert "repetitions," not in capsys.readouterr().err


def test_certificate_wording(tmp_path, capsys):
    from pulse_jax import stopping
    from pulse_jax.engine.params import declared_params

    rule = stopping.epsilon_good()
    text = rule.statement(["m1"], 0.05, declared_params(rule)._replace(epsilon=0.0))
    assert "within 0 of" not in text and "is the best model's (up to exact ties)" in text
    assert "is within 0.02 of the best" in rule.statement(["m1"], 0.05, declared_params(rule)._replace(epsilon=0.02))
    assert cli.main(["demo", "--epsilon", "0.02", "--stop", "budget", "--out", str(tmp_path / "d")]) == 2
    assert "--epsilon sets the stopping rule; drop --stop budget" in capsys.readouterr().err


def test_a_report_states_what_was_certified_before_what_was_not():
    """An epsilon-good stop: the report's first line says what is certified; "not separated" is about the
    exact best only and comes after."""
    import numpy as np

    from pulse_jax.live import Report

    three = np.array([0.7, 0.69, 0.5])
    report = Report("pulse", 0, ("a", "b", "c"), three, three - 0.02, three + 0.02, np.full(3, 80), np.full(3, 5), 240,
                    1000, 0.05, "a", False, ("b",), {"a": [], "b": [], "c": []}, stop="epsilon_good", stopped=True,
                    claimed=("a",), certificate="a's mean is within 0.02 of the best model's")
    first = report.to_markdown().splitlines()[2]
    assert first.index("certified by `epsilon_good`: a's mean is within 0.02") < first.index("not separated"), first
    assert "tied with the leader" not in first


def test_a_transposed_csv_is_refused(tmp_path, capsys):
    """40 models x 1,000 examples written the other way round (rows named 0..999, columns the models)."""
    models = [f"model-{i}" for i in range(40)]
    rows = ["model," + ",".join(models)] + [f"{j}," + ",".join(str((i + j) % 2) for i in range(40)) for j in range(1000)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert cli.main(["simulate", "--scores", str(tmp_path / "t.csv"), "--method", "ucbe", "--out",
                     str(tmp_path / "o")]) == 2
    assert "looks transposed: its 1,000 rows are named like example ids (0, 1, 2, ...)" in capsys.readouterr().err
    assert cli.main(["tune", "--train", str(tmp_path / "t.csv"), "--out", str(tmp_path / "h.json")]) == 2
    assert "looks transposed" in capsys.readouterr().err


def test_a_simulated_claiming_stop_is_tabled_and_saved(tmp_path, capsys):
    """``simulate --epsilon``: aligned "stopped" and "false claims" rows, a hint when nothing stopped, and
    the claim statistics in summary.json and the .npz."""
    import json

    import numpy as np

    from pulse_jax import synthetic

    b = synthetic.make_benchmark(seed=2, n_models=5, n_examples=80, n_train=10)
    np.savez(tmp_path / "s.npz", scores=b.scores)
    assert cli.main(["simulate", "--scores", str(tmp_path / "s.npz"), "--method", "ucbe", "--reps", "4",
                     "--batch-size", "8", "--epsilon", "0.05", "--budget", "200", "--quiet", "--out",
                     str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[0].strip(): line for line in out.splitlines() if "|" in line}
    assert len(rows["stopped"].split("|")[0]) == len(rows["false claims"].split("|")[0]) == 17
    assert "(no repetition stopped: the budget ran out first" in out or "%)" in rows["stopped"]
    stop = json.loads((tmp_path / "o" / "summary.json").read_text())["methods"]["ucbe"]["stop"]
    assert stop["stop"] == "epsilon_good" and 0 <= stop["error_rate"] <= 1 and "stopped_fraction" in stop
    with np.load(tmp_path / "o" / "ucbe.npz") as saved:
        assert saved["stopped"].shape == (4,) and saved["claimed"].shape == (4, 5)


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_a_larger_budget_continues_a_spent_log(tmp_path, capsys):
    """A log that spent its budget continues with a larger one, and asks exactly what a run started with
    the larger budget asks; a smaller budget, or one below what the log holds, is refused saying what to
    give; successive halving, which plans on its budget, keeps it."""
    from pulse_jax.errors import PulseInputError
    from pulse_jax.live import Selector, run

    bench = stand_in.benchmark()

    def selector(log, budget, rule="ucbe"):
        return Selector(bench.models[:8], 1000, budget, batch_size=16, method="pulse", train=bench.train, rank=4,
                        refit_every=5, log=log, stop="budget", rule=rule)

    def score(model, ids):
        return stand_in.score(model, ids)

    for log, budget in ((tmp_path / "a.db", 400), (tmp_path / "clean.db", 640)):
        sel = selector(log, budget)
        run(score, sel, handle_signals=False)
        sel.close()
    from pulse_jax.errors import PulseNote

    with pytest.warns(PulseNote, match="was started with a budget of 400 cells; it continues with 640"):   # said
        extended = selector(tmp_path / "a.db", 640)
    report = run(score, extended, handle_signals=False)
    extended.close()
    clean = selector(tmp_path / "clean.db", 640)
    assert clean.spent == report.spent == 640 and clean.evaluated() == report.evaluated
    clean.close()
    with pytest.raises(PulseInputError, match="--budget 300 is smaller than the 400 .* give --budget 400 or more"):
        selector(tmp_path / "a.db", 300)
    with pytest.raises(PulseInputError, match="--budget 500: .* already holds 640 evaluated cells; give --budget 640"):
        selector(tmp_path / "a.db", 500)
    sel = selector(tmp_path / "sh.db", 400, rule="successive_halving")
    run(score, sel, handle_signals=False)
    sel.close()
    with pytest.raises(PulseInputError, match="'successive_halving' plans on the budget"):
        selector(tmp_path / "sh.db", 640, rule="successive_halving")


def test_the_docs_import_no_deprecated_module_and_list_the_certificates():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "from pulse_jax import metrics" not in text and "pulse_jax.metrics " not in text, page.name
    api = (root / "docs" / "api.md").read_text()
    for name in ("stopping.epsilon_good.epsilon_good", "stopping.top_k.top_k", "stopping.tie_group.tie_group",
                 "stopping.tie_group.groups", "rules.lucb.lucb_top_k"):
        assert f"::: pulse_jax.{name}" in api, name
    readme = (root / "README.md").read_text()
    assert "pulse-jax --help; pulse-jax --version        # the commands; pulse-jax COMMAND --help" in readme


@pytest.mark.parametrize("flag", ["--top-k", "--tie-group"])
def test_certificates_naming_every_model_are_refused(tmp_path, capsys, flag):
    assert cli.main(["demo", flag, "40", "--out", str(tmp_path / "d")]) == 2
    assert f"{flag} 40: must be smaller than the number of models (40)" in capsys.readouterr().err


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_the_comparison_table_shows_the_change_in_cells(tmp_path, capsys):
    assert cli.main(["demo", "--reps", "30", "--budget", "12000", "--method", "ucbe,pulse", "--quiet", "--out",
                     str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "(-x%: x% fewer cells than ucbe to the target; +x%: more)" in out
    import re

    checked = 0
    for line in out.splitlines():
        if line.strip().startswith("to ") and "acc." in line:
            cells = [c.strip() for c in line.split("|")[1:]]
            base, other = cells[0], cells[1]
            if base[0].isdigit() and other[0].isdigit():        # both reached the target: the sign is the change
                b, o = (int(re.match(r"[\d,]+", c).group().replace(",", "")) for c in (base, other))
                change = int(re.search(r"\(([+-]\d+)%\)", other).group(1))
                assert change == round(100 * (o - b) / b), line
                checked += 1
    assert checked == 2, out                                     # 90% and 95%: PULSE needs fewer cells (-x%)


def _csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_a_first_column_not_named_model_is_read_with_a_note(tmp_path, capsys):
    from pulse_jax.fileio import data

    from pulse_jax.errors import PulseNote

    path = _csv(tmp_path / "s.csv", ["name", "q0", "q1"], [["a", 1, 0], ["b", 0, 1]])
    with pytest.warns(PulseNote, match="the first column is named 'name'; it is read as the model names"):
        assert data.load(path).models == ("a", "b")
    assert cli.main(["simulate", "--scores", str(path), "--method", "ucbe", "--reps", "1", "--batch-size", "1",
                     "--budget", "4", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert "note: " + str(path) + ": the first column is named" in capsys.readouterr().err   # one note line


@pytest.mark.parametrize("rows, needle", [
    ([["h0", 1, 0, 1]], "a history needs at least 2 models to fit embeddings on; it has 1"),
    ([["h0", 1, 0, 1], ["h1", "", "", ""]], "model 'h1' has no score at all; drop its row"),
])
def test_a_history_that_cannot_fit_embeddings_is_refused(tmp_path, capsys, rows, needle):
    cand = _csv(tmp_path / "c.csv", ["model", "q0", "q1", "q2"], [["a", 1, 0, 1], ["b", 0, 1, 1]])
    train = _csv(tmp_path / "t.csv", ["model", "q0", "q1", "q2"], rows)
    assert cli.main(["simulate", "--scores", str(cand), "--train", str(train), "--method", "pulse", "--reps", "2",
                     "--batch-size", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_a_jsonl_score_written_as_text_is_refused(tmp_path, capsys):
    path = tmp_path / "long.jsonl"
    path.write_text('{"model": "a", "example": "q0", "score": 0}\n{"model": "b", "example": "q0", "score": "1"}\n')
    assert cli.main(["import", "long", str(path), "--out", str(tmp_path / "w.csv")]) == 2
    assert 'score "1" is text, not a number' in capsys.readouterr().err


@pytest.mark.parametrize("name, text", [
    ("long.csv", "model,example,score\na,q0,True\nb,q0,False\na,q1,true\nb,q1,0.5\n"),     # pandas' to_csv
    ("long.jsonl", '{"model": "a", "example": "q0", "score": true}\n{"model": "b", "example": "q0", "score": false}\n'
                   '{"model": "a", "example": "q1", "score": true}\n{"model": "b", "example": "q1", "score": 0.5}\n')])
def test_a_boolean_score_column_reads_as_one_and_zero(tmp_path, name, text):
    from pulse_jax.harnesses.lm_evaluation import read_long

    path = tmp_path / name
    path.write_text(text)
    matrix = read_long(path)
    assert matrix.models == ("a", "b") and matrix.scores.tolist() == [[1.0, 1.0], [0.0, 0.5]]


def test_a_jsonl_log_header_without_the_runs_identity_is_refused(tmp_path, capsys):
    path = tmp_path / "h.jsonl"
    path.write_text('{"type": "header"}\n')
    for argv in (["log", "show", str(path)], ["log", "import", str(path), str(tmp_path / "h.db")]):
        assert cli.main(argv) == 2
        assert "is a log header without method, seed, models" in capsys.readouterr().err


def test_a_damaged_log_page_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    import sqlite3

    from pulse_jax.live import journal

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.txt").write_text("\n".join(stand_in.models()[:3]) + "\n")
    argv = ["select", "--models", "m.txt", "--examples", "40", "--budget", "60", "--evaluate",
            "pulse_jax.stand_in:score", "--method", "ucbe", "--log", "run.db", "--quiet", "--batch-size", "4"]
    assert cli.main(argv) == 0

    def damaged(*args, **kwargs):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(journal.Journal, "_records", damaged)
    assert cli.main(argv[:6] + ["80"] + argv[7:]) == 2
    err = capsys.readouterr().err
    assert "run.db: the log database cannot be read (database disk image is malformed): it is damaged" in err
    assert "Traceback" not in err
