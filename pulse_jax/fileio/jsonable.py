"""Values as strict JSON, the one way every log, result and report writes them."""
from __future__ import annotations

import math

import numpy as np


def plain_number(x) -> float | None:
    """A finite number as a Python float; None for NaN, an infinity or None (strict JSON has neither)."""
    if x is None:
        return None
    x = float(np.asarray(x))
    return None if math.isnan(x) or math.isinf(x) else x


def plain_value(v):
    """A plug-in setting as JSON: booleans, numbers, text and None as they are; a function or class by
    its qualified name; anything else as its ``repr``."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return getattr(v, "__qualname__", None) or repr(v)


def plain_float32(x) -> float | None:
    """A number computed in float32 as the shortest decimal that reads back to the same float32
    (``0.55``, not ``0.550000011920929``); None for NaN, an infinity or None."""
    value = plain_number(x)
    return None if value is None else float(str(np.float32(value)))
