"""A fixed configuration as Optuna params: what a queued trial (baseline, confirmation, warm start) carries."""

from __future__ import annotations

import contextlib
from typing import Any

import optuna

from autotune.compat import optuna_private
from autotune.search_space import SearchSpace, TrialConfig


def admissible_params(space: SearchSpace, config: TrialConfig) -> dict[str, Any]:
    """The config's values of searched knobs that lie inside the space (others cannot be Optuna params)."""
    distributions = space.distributions()
    params = {}
    for name, value in space.params_of(config).items():
        dist = distributions[name]
        with contextlib.suppress(ValueError, TypeError):
            if optuna_private.distribution_contains(dist, value):
                params[name] = value
    return params


def record_params(space: SearchSpace, trial: optuna.Trial, config: TrialConfig) -> None:
    """Ask Optuna for the enqueued params of a fixed config, so the trial carries them."""
    distributions = space.distributions()
    for name in admissible_params(space, config):
        dist = distributions[name]
        if isinstance(dist, optuna.distributions.IntDistribution):
            trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
        elif isinstance(dist, optuna.distributions.FloatDistribution):  # hp.<name> ranges
            trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
        elif isinstance(dist, optuna.distributions.CategoricalDistribution):
            trial.suggest_categorical(name, list(dist.choices))
