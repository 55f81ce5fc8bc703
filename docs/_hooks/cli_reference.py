"""mkdocs hook: the CLI reference is generated from ``pulse_jax.cli``'s argparse parsers at build time,
so it cannot drift from the command line."""
import argparse
import os

MARKER = "<!-- cli-reference -->"


def _block(title: str, parser: argparse.ArgumentParser) -> str:
    return f"## `{title}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    os.environ["COLUMNS"] = "100"          # argparse wraps help text to this width
    from pulse_jax import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    blocks = [_block("pulse-jax", parser)] + [_block(f"pulse-jax {name}", p) for name, p in sub.choices.items()]
    return markdown.replace(MARKER, "\n".join(blocks))
