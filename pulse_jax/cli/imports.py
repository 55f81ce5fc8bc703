"""``pulse-jax import``: per-sample results (lm-eval, Inspect, a long table) into a score matrix CSV."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pulse_jax.cli.options import HelpFormatter
from pulse_jax.cli.output import check_writable_file
from pulse_jax.errors import require
from pulse_jax.fileio import files


def add(sub) -> None:
    imp = sub.add_parser("import", formatter_class=HelpFormatter,
                         help="per-sample results (lm-eval logs, Inspect logs, a long table) into a score matrix CSV",
                         description="Convert per-sample evaluation results into the models x examples CSV "
                                     "that simulate, sweep and select read (missing cells stay empty).")
    kinds = imp.add_subparsers(dest="source", required=True, metavar="SOURCE")
    lm = kinds.add_parser("lm-eval", formatter_class=HelpFormatter,
                          help="lm-evaluation-harness output folders (--output_path ... --log_samples)")
    lm.add_argument("folders", nargs="+", metavar="DIR", help="output folders, searched for samples_<task>_*.jsonl")
    lm.add_argument("--task", required=True, help="the lm-eval task")
    lm.add_argument("--metric", required=True, help="the per-sample metric (acc, exact_match, ...), in [0, 1]")
    lm.add_argument("--filter", default=None, help="the filter (strict-match, flexible-extract, ...); needed when "
                                                   "the task logs several")
    ins = kinds.add_parser("inspect", formatter_class=HelpFormatter,
                           help="Inspect eval logs (.eval / .json files, or folders of them)")
    ins.add_argument("logs", nargs="+", metavar="LOG", help="log files or folders (searched recursively)")
    ins.add_argument("--task", default=None, help="the task (needed when the logs hold several)")
    ins.add_argument("--scorer", default=None, help="the scorer (needed when samples carry several scores)")
    ins.add_argument("--metric", default=None, help="for a scorer whose values are dicts, the key to read")
    ins.add_argument("--epochs", choices=("mean", "separate"), default="mean",
                     help="several epochs of a sample: averaged into one example, or one example each (id@epoch)")
    ins.add_argument("--value-map", action="append", default=[], metavar="VALUE=NUMBER",
                     help="a score value as a number in [0, 1] (defaults: C=1, I=0, P=0.5, N=0)")
    ins.add_argument("--tokens", default=None, help="CSV of each cell's token usage (default: <out>.tokens.csv)")
    long = kinds.add_parser("long", formatter_class=HelpFormatter,
                            help="a long table with one row per (model, example, score): CSV, JSONL or Parquet")
    long.add_argument("file", help="the table (.csv, .jsonl or .parquet)")
    long.add_argument("--model-column", default="model", help="the column naming the model")
    long.add_argument("--example-column", default="example", help="the column naming the example")
    long.add_argument("--score-column", default="score",
                      help="the column holding the score, a number in [0, 1] (true and false read as 1 and 0)")
    for p in (lm, ins, long):
        p.add_argument("--out", required=True, help="the score matrix CSV to write")
        p.add_argument("--force", action="store_true", help="write over an existing --out file")


def run(args) -> None:
    from pulse_jax.fileio import data
    from pulse_jax.harnesses import lm_evaluation

    out = Path(args.out)
    require(not out.is_dir(), f"--out {out}: is a directory; give a .csv file name")
    require(args.force or not files.exists(out), f"--out {out}: exists; pass --force to write over it")
    check_writable_file(args.out, "--out")
    if args.source == "lm-eval":
        matrix = lm_evaluation.read_lm_eval(args.folders, args.task, args.metric, args.filter)
    elif args.source == "inspect":
        from pulse_jax.harnesses import inspect_logs

        tokens = Path(args.tokens) if args.tokens else out.with_name(out.stem + ".tokens.csv")
        require(args.force or not files.exists(tokens), f"--tokens {tokens}: exists; pass --force to write over it")
        logs = inspect_logs.read_inspect(args.logs, task=args.task, scorer=args.scorer, metric=args.metric,
                                            epochs=args.epochs,
                                            value_map=inspect_logs.parse_value_map(args.value_map))
        matrix = logs.scores
        inspect_logs.save_tokens(logs, tokens)
        cells = int((~np.isnan(logs.input_tokens)).sum())
        print(f"tokens: {np.nansum(logs.input_tokens):,.0f} input + {np.nansum(logs.output_tokens):,.0f} output over "
              f"{cells:,} cells (scorer {logs.scorer!r}); wrote {tokens}")
    else:
        matrix = lm_evaluation.read_long(args.file, model=args.model_column, example=args.example_column,
                                   score=args.score_column)
    data.save_csv(matrix, out)
    print(f"{matrix.source}: {lm_evaluation.describe(matrix)}")
    print(f"wrote {out}")
