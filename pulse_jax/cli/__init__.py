"""The command line: ``pulse-jax demo``, ``simulate``, ``sweep``, ``tune``, ``select``, ``import`` and
``log``, one module per command; `options` holds the option groups they share, `output` what they
print and write, `inputs` and `scorers` what they read; `app` builds the parser and runs ``main``.
"""
from pulse_jax.cli.app import build_parser, main, parse

__all__ = ["build_parser", "main", "parse"]
