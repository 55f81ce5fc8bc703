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


class PulseNote(UserWarning):
    """Something pulse-jax chose or did on its own that its user should be told (a default rule, a
    raised level, a file converted): a warning, so a library prints nothing; the command line shows
    each as one ``note:`` line."""


def note(message: str) -> None:
    """Tell the user ``message`` as a `PulseNote` warning."""
    import warnings

    warnings.warn(message, PulseNote, stacklevel=3)
