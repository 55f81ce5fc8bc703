"""A newcomer's mistakes at the command line: is each refused in one line, before anything compiles?

Runs 94 mistaken ``pulse-jax`` commands (a missing or misspelt option, a value out of range, a file that
is not what the command reads, two choices that contradict each other, ...) in a scratch folder with
small files of the right and the wrong shape, each as its own process with ``JAX_LOG_COMPILES=1``.
Each outcome is one of:

* ``refused``: a nonzero exit, one line on stderr (notes and JAX's compile log aside), nothing
  compiled before it (the target: at least 89 of 94);
* ``refused after compiling``: the same line, but only after JAX compiled a program (seconds lost);
* ``several lines``: a nonzero exit whose message takes more than one line;
* ``traceback``: a Python traceback (the target: none);
* ``accepted``: the command ran (exit 0) although its input was wrong.

    python benchmarks/usability/bench_mistakes.py --out docs/benchmarks/mistakes.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

S = "--scores cand.csv --out sim_out"
SEL = "select --models models.txt --evaluate scorer:score --examples 200 --log run.db --budget 400"
#: (what the newcomer did wrong, the command after ``pulse-jax``).
MISTAKES = [
    # simulate
    ("simulate without --scores", "simulate --out sim_out"),
    ("a scores file that does not exist", "simulate --scores nofile.csv --out sim_out"),
    ("PULSE without history", f"simulate {S} --method pulse"),
    ("an unknown method", f"simulate {S} --method pulsar"),
    ("a budget of 0", f"simulate {S} --method ucbe --budget 0"),
    ("a negative budget", f"simulate {S} --method ucbe --budget -5"),
    ("a batch size of 0", f"simulate {S} --method ucbe --batch-size 0"),
    ("a batch larger than the examples", f"simulate {S} --method ucbe --batch-size 1000"),
    ("delta above 1", f"simulate {S} --method ucbe --delta 1.5"),
    ("delta of 0", f"simulate {S} --method ucbe --delta 0"),
    ("0 repetitions", f"simulate {S} --method ucbe --reps 0"),
    ("an unknown sampling rule", f"simulate {S} --method ucbe --rule lucky"),
    ("an unknown stopping rule", f"simulate {S} --method ucbe --stop soon"),
    ("epsilon above 1", f"simulate {S} --method ucbe --epsilon 2"),
    ("top-k as many as the models", f"simulate {S} --method ucbe --top-k 6"),
    ("two certificates at once", f"simulate {S} --method ucbe --top-k 2 --tie-group 2"),
    ("an unknown --param", f"simulate {S} --method ucbe --param nosuch=1"),
    ("--param without a value", f"simulate {S} --method ucbe --param delta"),
    ("a matrix with examples as rows", "simulate --scores transposed.csv --method ucbe --out sim_out"),
    ("a text cell in the matrix", "simulate --scores text.csv --method ucbe --out sim_out"),
    ("a cost file that does not exist", f"simulate {S} --method ucbe --cost nofile.csv"),
    ("--cheapest without prices", f"simulate {S} --method ucbe --cheapest 0.05"),
    ("rank 0", f"simulate {S} --train train.csv --rank 0"),
    ("a negative exploration", f"simulate {S} --method ucbe --exploration -1"),
    ("an unknown --bounds", f"simulate {S} --method ucbe --bounds some"),
    ("an unknown --sequence", f"simulate {S} --method ucbe --sequence gauss"),
    ("an output folder holding another run", "simulate --scores cand.csv --method ucbe --out full_folder"),
    ("a negative seed", f"simulate {S} --method ucbe --seed -1"),
    ("an .npz without a scores array", "simulate --scores wrong.npz --method ucbe --out sim_out"),
    ("concurrency 0", f"simulate {S} --method ucbe --concurrency 0"),
    ("an empty scores file", "simulate --scores empty.csv --method ucbe --out sim_out"),
    ("a score above 1", "simulate --scores above_one.csv --method ucbe --out sim_out"),
    ("history on other examples", f"simulate {S} --train other_train.csv"),
    ("--front without prices", f"simulate {S} --method ucbe --front 0.05"),
    # sweep
    ("a grid with no values", f"sweep {S} --method ucbe --grid delta="),
    ("a grid over an unknown number", f"sweep {S} --method ucbe --grid nosuch=1,2"),
    ("a sweep without a grid", f"sweep {S} --method ucbe"),
    ("a grid value out of range", f"sweep {S} --method ucbe --grid delta=0.1,2"),
    ("a grid of words", f"sweep {S} --method ucbe --grid delta=a,b"),
    ("an unknown sweep target", f"sweep {S} --method ucbe --grid delta=0.1,0.2 --target speed"),
    ("two methods in one sweep", f"sweep {S} --method ucbe,naive --grid delta=0.1,0.2"),
    ("a baseline outside the grid", f"sweep {S} --method ucbe --grid delta=0.1,0.2 --baseline nosuch=1"),
    # tune
    ("tune without history", "tune --out tune_out"),
    ("tune with rank 0", "tune --train train.csv --ranks 0 --out tune_out"),
    ("tune with ranks as words", "tune --train train.csv --ranks a --out tune_out"),
    ("tune with one fold", "tune --train train.csv --folds 1 --out tune_out"),
    ("tune with a negative l2", "tune --train train.csv --lams -1 --out tune_out"),
    ("tune with 0 epochs", "tune --train train.csv --epochs 0 --out tune_out"),
    ("tune on a file that does not exist", "tune --train nofile.csv --out tune_out"),
    # select
    ("select with nothing", "select --budget 400"),
    ("select without a scorer", "select --models models.txt --examples 200 --log run.db --budget 400"),
    ("a scorer module that does not exist", "select --models models.txt --evaluate nosuchmod:score --examples 200 --log run.db --budget 400"),
    ("a scorer without its function", "select --models models.txt --evaluate scorer --examples 200 --log run.db --budget 400"),
    ("a scorer function that does not exist", "select --models models.txt --evaluate scorer:nope --examples 200 --log run.db --budget 400"),
    ("a models file that does not exist", "select --models nofile.txt --evaluate scorer:score --examples 200 --log run.db --budget 400"),
    ("an empty models file", "select --models empty.txt --evaluate scorer:score --examples 200 --log run.db --budget 400"),
    ("a model named twice", "select --models dup.txt --evaluate scorer:score --examples 200 --log run.db --budget 400"),
    ("a score matrix as --models", "select --models cand.csv --evaluate scorer:score --examples 200 --log run.db --budget 400"),
    ("0 examples", "select --models models.txt --evaluate scorer:score --examples 0 --log run.db --budget 400"),
    ("examples as a word", "select --models models.txt --evaluate scorer:score --examples abc --log run.db --budget 400"),
    ("a budget below the first look", "select --models models.txt --evaluate scorer:score --examples 200 --log run.db --budget 5"),
    ("concurrency 0 for select", f"{SEL} --concurrency 0"),
    ("negative retries", f"{SEL} --retries -1"),
    ("a call timeout of 0", f"{SEL} --call-timeout 0"),
    ("a money budget without prices", f"{SEL} --budget-usd 5"),
    ("a price that is not a number", f"{SEL} --price m0=abc"),
    ("a price without a model", f"{SEL} --price =1"),
    ("--cheapest in select without prices", f"{SEL} --cheapest 0.05"),
    ("a log in a folder that does not exist",
     "select --models models.txt --evaluate scorer:score --examples 200 --log nodir/run.db --budget 400"),
    ("a folder as the log", "select --models models.txt --evaluate scorer:score --examples 200 --log full_folder --budget 400"),
    ("history that does not exist", f"{SEL} --train nofile.csv"),
    ("Naive-Pooling without history", f"{SEL} --method naive"),
    ("top-k 0", f"{SEL} --top-k 0"),
    ("a negative grace", f"{SEL} --grace -1"),
    ("a value map for a scorer of numbers", f"{SEL} --value-map C=1"),
    ("a certified stop for a method without an interval", f"{SEL} --method naive --train train.csv --stop certified"),
    ("a rank for UCB-E", f"{SEL} --method ucbe --rank 4"),
    # import and log
    ("import without a source", "import"),
    ("import long from a file that does not exist", "import long nofile.csv --out m.csv"),
    ("import long without the score column", "import long long_bad.csv --out m.csv"),
    # a long table where a matrix is read
    ("a long table as the candidates' scores", "simulate --scores long.csv --out sim_out"),
    ("a long table as the history", f"simulate {S} --train long.csv"),
    ("a long table as select's history", f"{SEL} --train long.csv"),
    ("a long table as tune's history", "tune --train long.csv --out tune_out"),
    ("import lm-eval from a folder that does not exist", "import lm-eval nodir --task t --metric acc --out m.csv"),
    ("log show on a file that does not exist", "log show nofile.db"),
    ("log show on a text file", "log show models.txt"),
    ("log without an action", "log"),
    # demo and general
    ("demo with 0 repetitions", "demo --reps 0"),
    ("demo with an unknown method", "demo --method pulsar"),
    ("demo with a budget below the first look", "demo --budget 1"),
    ("--version with an argument", "--version extra"),
    ("a misspelt command", "simulat --scores cand.csv --out sim_out"),
    ("a misspelt option", f"simulate {S} --method ucbe --budgte 100"),
]


def _write_files(folder: Path) -> None:
    rng = np.random.default_rng(0)
    n = 200        # room for simulate's default batch (64) and tune's default ranks (up to 16)
    cand = (rng.random((6, n)) < np.linspace(0.3, 0.8, 6)[:, None]).astype(int)
    train = (rng.random((24, n)) < 0.5).astype(int)

    def csv(path, matrix, models, examples):
        rows = ["model," + ",".join(examples)] + [f"{m}," + ",".join(map(str, r)) for m, r in zip(models, matrix)]
        (folder / path).write_text("\n".join(rows) + "\n")

    examples = [f"q{j}" for j in range(n)]
    csv("cand.csv", cand, [f"m{i}" for i in range(6)], examples)
    csv("train.csv", train, [f"h{i}" for i in range(24)], examples)
    csv("other_train.csv", train, [f"h{i}" for i in range(24)], [f"z{j}" for j in range(n)])
    csv("transposed.csv", cand.T, examples, [f"m{i}" for i in range(6)])
    text = cand.astype(str)
    text[2, 5] = "yes"
    csv("text.csv", text, [f"m{i}" for i in range(6)], examples)
    above = cand.astype(float)
    above[1, 3] = 7.0
    csv("above_one.csv", above, [f"m{i}" for i in range(6)], examples)
    (folder / "empty.csv").write_text("")
    np.savez(folder / "wrong.npz", values=cand)
    (folder / "models.txt").write_text("".join(f"m{i}\n" for i in range(6)))
    (folder / "empty.txt").write_text("")
    (folder / "dup.txt").write_text("m0\nm1\nm0\n")
    (folder / "long_bad.csv").write_text("model,example,value\nm0,q0,1\n")
    (folder / "long.csv").write_text("model,example,score\nm0,q0,1\nm0,q1,0\nm1,q0,1\nm1,q1,1\n")
    (folder / "scorer.py").write_text("def score(model, ids):\n    return [0.5 for _ in ids]\n")
    (folder / "full_folder").mkdir()
    (folder / "full_folder" / "results.json").write_text("{}")


#: ``pulse-jax ARGS`` as ``python -m pulse_jax.cli`` runs it, then a note of whether JAX was imported by the
#: time the command ended (a refusal should not need it: importing JAX alone costs about a CPU-second).
PROBE = """import os, sys
from pulse_jax.cli.app import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
with open(os.environ["MISTAKE_PROBE"], "w") as handle:
    handle.write(str("jax" in sys.modules))
sys.exit(code)
"""


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _classify(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    err = proc.stderr
    compiled = "Compiling " in err or "Finished XLA compilation" in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("note:", "WARNING:"))
             and "jax._src" not in line and "Compiling " not in line and "Finished " not in line]
    if "Traceback (most recent call last)" in err:
        return "traceback", lines[-1] if lines else ""
    if proc.returncode == 0:
        return "accepted", ""
    if len(lines) != 1:
        return "several lines", " | ".join(lines[:3])
    return ("refused after compiling" if compiled else "refused"), lines[0]


def run(out: Path) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_files(folder)
        env = {**os.environ, "JAX_LOG_COMPILES": "1", "PYTHONPATH": str(folder),
               "PULSE_JAX_CACHE": os.environ.get("PULSE_JAX_CACHE", "off")}
        for k, (what, command) in enumerate(MISTAKES, 1):
            for leftover in ("run.db", "run.db.embeddings.npy", "m.csv", "sim_out", "tune_out", "run_report"):
                path = folder / leftover                  # each mistake on a fresh scratch folder
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
            start, before = time.perf_counter(), _children_cpu()
            probe = folder / "jax_imported.txt"
            probe.unlink(missing_ok=True)
            try:
                proc = subprocess.run([sys.executable, "-c", PROBE, *command.split()], cwd=folder,
                                      env={**env, "MISTAKE_PROBE": str(probe)}, capture_output=True, text=True,
                                      timeout=300)
                outcome, line = _classify(proc)
            except subprocess.TimeoutExpired:
                outcome, line = "accepted", "still running after 300 s"
            rows.append({"mistake": what, "command": "pulse-jax " + command, "outcome": outcome, "line": line[:300],
                         "seconds": round(time.perf_counter() - start, 1),
                         "cpu_seconds": round(_children_cpu() - before, 2),
                         "jax_imported": probe.is_file() and probe.read_text() == "True"})
            print(f"{k:3d} {outcome:24s} {what}: {line[:110]}", file=sys.stderr)
    counts = {o: sum(r["outcome"] == o for r in rows)
              for o in ("refused", "refused after compiling", "several lines", "traceback", "accepted")}
    refused = [r for r in rows if r["outcome"] == "refused"]
    result = {"mistakes": len(rows), **counts,
              "refused_before_jax": sum(not r["jax_imported"] for r in refused),
              "max_cpu_seconds_per_refusal": max((r["cpu_seconds"] for r in refused), default=0.0),
              "median_cpu_seconds_per_refusal": float(np.median([r["cpu_seconds"] for r in refused])) if refused else 0.0,
              "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text("# A newcomer's mistakes at the command line\n\n`python benchmarks/usability/"
                                      "bench_mistakes.py --out docs/benchmarks/mistakes.json` (each command its own "
                                      "process, `JAX_LOG_COMPILES=1`)\n\n" + table(result) + "\n")
    return result


def table(result: dict) -> str:
    lines = [f"{result['mistakes']} mistaken commands: {result['refused']} refused in one line before anything "
             f"compiled, {result['refused after compiling']} after compiling, {result['several lines']} with a "
             f"message of several lines, {result['traceback']} tracebacks, {result['accepted']} accepted. "
             f"Of the refusals, {result['refused_before_jax']} came before JAX was imported; CPU time per refusal "
             f"(the whole process): median {result['median_cpu_seconds_per_refusal']:.2f} s, at most "
             f"{result['max_cpu_seconds_per_refusal']:.2f} s.", "",
             "| mistake | command | outcome | JAX imported | CPU s | what it said |", "|---|---|---|---|---:|---|"]
    for r in result["rows"]:
        said = r["line"].replace("|", "\\|")
        lines.append(f"| {r['mistake']} | `{r['command']}` | {r['outcome']} | {'yes' if r['jax_imported'] else 'no'} | "
                     f"{r['cpu_seconds']:.2f} | {said} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = common.parser(__doc__, out="results/bench_mistakes.json").parse_args(argv)
    result = run(Path(args.out))
    print(table(result).split("\n\n")[0])
    return 0 if result["traceback"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
