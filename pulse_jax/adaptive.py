"""The adaptive-sampling estimator's earlier home: it is `pulse_jax.estimators.adaptive`."""
from pulse_jax.estimators.adaptive import AdaptiveState, desraj_proxies, pulse_adaptive, residual_sd_weights

__all__ = ["AdaptiveState", "desraj_proxies", "pulse_adaptive", "residual_sd_weights"]
