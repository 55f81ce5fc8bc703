"""``python -m pulse_jax.cli``: the same program as ``pulse-jax``."""
import sys

from pulse_jax.cli.app import main

sys.exit(main())
