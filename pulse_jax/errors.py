"""User-facing errors.

Every problem with the caller's input is raised as `PulseInputError`
with a one-line message that names what is wrong and where (file, row,
column or parameter). The CLI prints that line and exits non-zero; nothing
reaches the user as a traceback from inside JAX.
"""
import contextlib
import logging
import warnings


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
    warnings.warn(message, PulseNote, stacklevel=3)



@contextlib.contextmanager
def notes_as_lines():
    """Inside this block, each `PulseNote` goes to the ``pulse_jax`` logger as one ``note: ...`` record
    instead of a Python warning with a source path (what a host program such as ``inspect eval`` would
    show: it shows its loggers' records as lines); other warnings pass through as they are. Leaves the
    warning filters as it found them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PulseNote)
        try:
            yield
        finally:
            notes = [w for w in caught if issubclass(w.category, PulseNote)]
            others = [w for w in caught if not issubclass(w.category, PulseNote)]
    for w in notes:
        logging.getLogger("pulse_jax").warning("note: %s", w.message)
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
