"""autotune's default sampler: Gaussian-process Bayesian optimisation that learns from pruned trials too."""

from __future__ import annotations

import copy
import math
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import GPSampler
from optuna.trial import FrozenTrial, TrialState

__all__ = ["PartialGPSampler"]

_CONSTRAINTS_PREFIX = "constraints:"  # how optuna.Trial.set_constraint stores a constraint


class PartialGPSampler(GPSampler):
    """Optuna's GPSampler for a single objective, fitted on pruned trials as well, and never proposing a
    configuration the study has already measured.

    GPSampler models complete trials only. With a pruner that stops most trials early, it would keep
    proposing the regions it was just shown to be poor, and see them pruned again. A pruned trial's
    last reported value is a measurement (for throughput an unbiased one, just shorter; for a loss at
    an earlier step a pessimistic one), and autotune scores pruned trials on it: the model sees it too.

    A noisy model's expected improvement is often highest at the incumbent itself, so GP search repeats
    its best configuration; re-measuring the best is the confirmation runs' job. When the model's choice
    has been measured (or is running), this trial samples at random instead: one more point explored.
    """

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        params = super().sample_relative(_WithPartial(study), trial, search_space)  # type: ignore[arg-type]
        if params and _measured(study, trial, params):
            return {}
        return params


def _measured(study: optuna.Study, trial: FrozenTrial, params: dict[str, Any]) -> bool:
    """Whether another trial (finished or running) already has these values of these parameters."""
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    for other in study._get_trials(deepcopy=False, states=states, use_cache=False):
        if other.number != trial.number and all(
            name in other.params and other.params[name] == value for name, value in params.items()
        ):
            return True
    return False


class _WithPartial:
    """A study as the GP sees it: its pruned trials (with a finite last value) listed as complete."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self, deepcopy: bool = True, states: Any = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=None, use_cache=use_cache)
        wanted = None if states is None else tuple(states)
        # GPSampler needs the same constraints on every trial it fits. autotune records a pruned trial's
        # constraints as measured; one pruned before that (an older study) counts as feasible: a trial over
        # the memory budget ends as oom, not pruned.
        names = {name for t in trials if t.state == TrialState.COMPLETE for name in _constraints(t)}
        out: list[FrozenTrial] = []
        for t in trials:
            partial = _as_complete(t, names) if t.state == TrialState.PRUNED else None
            if partial is not None and (wanted is None or TrialState.COMPLETE in wanted):
                out.append(partial)
            elif partial is None and (wanted is None or t.state in wanted):
                out.append(t)
        return out


def _constraints(trial: FrozenTrial) -> list[str]:
    return [key for key in trial.system_attrs if key.startswith(_CONSTRAINTS_PREFIX)]


def _as_complete(trial: FrozenTrial, constraint_names: set[str]) -> FrozenTrial | None:
    step = trial.last_step
    if step is None:
        return None
    value = trial.intermediate_values[step]
    if not math.isfinite(value):
        return None
    partial = copy.copy(trial)
    partial.system_attrs = dict(trial.system_attrs)
    for name in constraint_names:
        partial.system_attrs.setdefault(name, 0.0)
    partial.state = TrialState.COMPLETE
    partial.values = [value]
    return partial
