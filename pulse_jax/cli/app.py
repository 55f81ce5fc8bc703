"""The ``pulse-jax`` program: its parser (one subcommand per module of `pulse_jax.cli`) and ``main``.

Errors in the input print one line (``pulse-jax: error: ...``) and exit 2."""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import sqlite3
import sys
import warnings

from pulse_jax.cli import demo, imports, log, selection, simulate, sweep, tune
from pulse_jax.cli.options import HelpFormatter, Parser, fill_defaults
from pulse_jax.errors import PulseInputError, PulseNote

#: Each subcommand's module: ``add(subparsers)`` declares its options, ``run(args)`` carries it out.
COMMANDS = {"demo": demo, "simulate": simulate, "sweep": sweep, "tune": tune, "select": selection, "import": imports,
            "log": log}


def build_parser() -> argparse.ArgumentParser:
    from pulse_jax import __version__

    parser = Parser(prog="pulse-jax", formatter_class=HelpFormatter, description=(
        "Find the best model while evaluating a fraction of the (model, example) cells: "
        "PULSE, UCB-E and Naive-Pooling as a vmap-ed JAX simulation, and live selection."),
        epilog="Compiled programs are cached in $PULSE_JAX_CACHE (default ~/.cache/pulse-jax/xla); "
               "PULSE_JAX_CACHE=off turns the cache off.")
    parser.add_argument("--version", action="version", version=f"pulse-jax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        command.add(sub)
    return parser


def parse(argv=None, parser=None):
    """``(args, unrecognized)``: the command line parsed, with the defaults that depend on the command
    filled in (`pulse_jax.cli.options.fill_defaults`; ``args.given`` names the options given)."""
    args, extra = (parser or build_parser()).parse_known_args(argv)
    fill_defaults(args)
    return args, extra


def _use_the_cache() -> None:
    from pulse_jax.compilation_cache import use_compilation_cache

    use_compilation_cache()     # once per process; a cache the caller configured is left as it is


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then()`` the moment module ``name`` has been imported. A command refused on its arguments
    never imports JAX (about a CPU-second), yet the disk cache is on before anything compiles."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            then()

        spec.loader.exec_module = exec_module
        return spec


def _once_jax_is_imported(then) -> None:
    """``then()`` now if JAX is imported (the command line run in a process that has it), else right after
    its import."""
    if "jax" in sys.modules:
        then()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("jax", then))


def main(argv=None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if "--version" in words and len(words) > 1:      # argparse would print it and drop the rest unread
        print(f"pulse-jax: error: --version takes nothing else; got {' '.join(w for w in words if w != '--version')}",
              file=sys.stderr)
        return 2
    args, extra = parse(argv)
    if extra:       # name the command they were given to, not the top level
        command = " ".join([args.command] + [getattr(args, name) for name in ("source", "action")
                                             if isinstance(getattr(args, name, None), str)])
        print(f"pulse-jax: error: {command}: unrecognized arguments: {' '.join(extra)} (see pulse-jax {command} "
              "--help)", file=sys.stderr)
        return 2
    if "jax" not in sys.modules:
        # XLA's own C++ log lines ("Very slow compile? If you want to file a bug, ..." when a compile is
        # slow on a busy machine) read as errors in the middle of a run; the command line shows its own
        # lines and Python's warnings only. TF_CPP_MIN_LOG_LEVEL=0 brings XLA's back.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _once_jax_is_imported(_use_the_cache)
    try:
        with warnings.catch_warnings():
            # a note (`pulse_jax.errors.PulseNote`) is one plain line on stderr, every time it is given
            warnings.simplefilter("always", PulseNote)
            warnings.showwarning = _show_note
            COMMANDS[args.command].run(args)
    except BrokenPipeError:    # the reader went away (``| head``): what it wanted was written; end quietly
        quiet_stdout()
        return 0
    except PulseInputError as err:
        print(f"pulse-jax: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:   # a file we were told to read or write: say which, in one line
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(f"pulse-jax: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as err:   # a log damaged in a page only a later read reaches
        log = getattr(args, "log", None) or getattr(args, "path", None) or "the log"
        print(f"pulse-jax: error: {log}: the log database cannot be read ({err}): it is damaged; `pulse-jax log "
              "show` says what is left in it; restore it from a copy", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        from pulse_jax.live.runner import Interrupted

        if isinstance(err, Interrupted):
            print(f"\npulse-jax: {err}", file=sys.stderr)
            return _exit_now(err.exit_code) if argv is None else err.exit_code
        print("pulse-jax: interrupted", file=sys.stderr)
        return _exit_now(130) if argv is None else 130
    return 0


_PYTHON_SHOWWARNING = warnings.showwarning


def _show_note(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, PulseNote):
        print(f"note: {message}", file=sys.stderr)
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)   # everything else as Python shows it


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's own flush at exit meets no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _exit_now(code: int) -> int:
    """End the program at once after an interruption (everything paid for is committed and the log
    closed): the interpreter's shutdown would stop threads still running -- a scorer call abandoned in
    flight, a library's background thread -- in the middle of native code, which can abort the process
    instead of exiting with ``code``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
    return code   # not reached
