"""User-facing errors.

Every problem with the caller's input is raised as `PulseInputError`
with a one-line message that names what is wrong and where (file, row,
column or parameter). The CLI prints that line and exits non-zero; nothing
reaches the user as a traceback from inside JAX.
"""


class PulseInputError(ValueError):
    """Bad input: the message names the file/row/column or parameter."""


def require(condition: bool, message: str) -> None:
    """Raise `PulseInputError` with ``message`` unless ``condition``."""
    if not condition:
        raise PulseInputError(message)
