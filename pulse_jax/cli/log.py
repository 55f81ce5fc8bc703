"""``pulse-jax log``: show, export or import a ``select`` log."""
from __future__ import annotations

import sys

from pulse_jax.cli.options import HelpFormatter
from pulse_jax.errors import require
from pulse_jax.fileio import files


def add(sub) -> None:
    log = sub.add_parser("log", formatter_class=HelpFormatter, help="read, export or import a select log",
                         description="A select log is an SQLite database. Show what it holds, export it as "
                                     "JSONL to read or diff, or import a JSONL log as a new database.")
    actions = log.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", formatter_class=HelpFormatter, help="the run, its progress and checks")
    show.add_argument("log", help="the log (a running one can be read)")
    export = actions.add_parser("export", formatter_class=HelpFormatter, help="the log as JSONL (checksummed)")
    export.add_argument("log", help="the log")
    export.add_argument("--jsonl", default="-", metavar="FILE", help="where to write (default: standard output)")
    export.add_argument("--force", action="store_true", help="write over an existing --jsonl file")
    imp = actions.add_parser("import", formatter_class=HelpFormatter, help="a JSONL log as a new database")
    imp.add_argument("jsonl", help="the JSONL log (from export, or an earlier pulse-jax)")
    imp.add_argument("log", help="the database to create (must not exist)")


def run(args) -> None:
    from pulse_jax.live import journal, legacy_jsonl

    if args.action == "import":
        n = legacy_jsonl.import_jsonl(args.jsonl, args.log)
        print(f"wrote {args.log}: {n} batch(es) from {args.jsonl}")
        return
    if args.action == "export":
        if args.jsonl != "-":
            files.check_replaceable(args.jsonl, "--jsonl")    # before anything reads it (a FIFO would block)
        require(args.jsonl == "-" or args.force or not files.exists(args.jsonl),
                f"--jsonl {args.jsonl}: exists; pass --force to write over it")
        require(args.jsonl == "-" or not _is_log_database(args.jsonl),
                f"--jsonl {args.jsonl}: is a pulse-jax log database (perhaps a running one); an export never "
                "replaces a log, even with --force: give another file name")
        header, records = journal.snapshot(args.log)
        require(header is not None, f"{args.log}: the log has no run yet")
        lines = legacy_jsonl.as_jsonl(header, records)
        if args.jsonl == "-":
            sys.stdout.write(lines)
        else:
            files.write_atomically(args.jsonl, lines)
            print(f"wrote {args.jsonl}: {len(records)} batch(es)", file=sys.stderr)
        return
    header, records = journal.snapshot(args.log)
    require(header is not None, f"{args.log}: the log has no run yet")
    told = [r for r in records if r["type"] == "tell"]
    paid = [r for r in records if r["type"] == "paid"]
    cells = sum(len(r["examples"]) for r in told)
    print(f"{args.log}: pulse-jax log; {legacy_jsonl.checks_of(header)}")
    print(f"  method {header.get('method')}, seed {header.get('seed')}, {_count(header.get('models'))} models x "
          f"{_count(header.get('examples'))} examples, budget {_count(header.get('budget'))}, batch "
          f"{header.get('batch_size')}")
    print(f"  told: {len(told):,} batch(es), {cells:,} cells; paid but not yet told: {len(paid)} batch(es), "
          f"{sum(len(r['examples']) for r in paid):,} cells")
    per_model = {}
    for r in told:
        per_model[r["model"]] = per_model.get(r["model"], 0) + len(r["examples"])
    for model, count in sorted(per_model.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {count:>8,}  {model}")


def _is_log_database(path) -> bool:
    """Whether ``path`` is a pulse-jax log database (its SQLite header and application id)."""
    from pulse_jax.live.log_schema import APPLICATION_ID, MAGIC, read_file_header

    try:
        head, app, _ = read_file_header(path)
    except (OSError, ValueError):
        return False
    return head == MAGIC and app == APPLICATION_ID


def _count(value) -> str:
    """A header's count for people: a list's length, an integer with separators, else as it is."""
    if isinstance(value, list):
        return f"{len(value):,}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
