"""Seeds to PRNG keys, the one place a user's integer seed becomes randomness."""
from __future__ import annotations

import numpy as np

from pulse_jax.errors import PulseInputError


def check_seed(seed, where: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**64)``, refused clearly outside it (no key made: nothing compiles)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise PulseInputError(f"{where} must be an integer, got {seed!r}")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise PulseInputError(f"{where} must lie in [0, 2**64), got {seed}")
    return seed


def seed_key(seed, where: str = "seed"):
    """The base PRNG key of a seed anywhere in ``[0, 2**64)``, refused clearly outside it (`check_seed`).

    Seeds below ``2**32`` give ``PRNGKey(seed)``; larger ones fold their high 32
    bits into the key of the low 32 bits, so ``2**32`` does not repeat seed 0.
    """
    import jax

    seed = check_seed(seed, where)
    key = jax.random.PRNGKey(seed & 0xFFFFFFFF)
    return key if seed < 2**32 else jax.random.fold_in(key, seed >> 32)
