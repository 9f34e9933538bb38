"""An Optuna pruner's view of a study in which only feasible trials that ran to their end are references."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.pruners import BasePruner

from autotune.objectives import is_reference


class FeasibleReferences(BasePruner):
    """An Optuna pruner that sees, among the finished trials, only the feasible ones that ran to their end
    (:func:`autotune.objectives.is_reference`): an oom or diverged trial, told COMPLETE with its partial
    values, is never the trial others are measured against. (Hyperband's brackets read the storage
    directly, so it cannot be wrapped this way.)"""

    def __init__(self, pruner: BasePruner) -> None:
        self.pruner = pruner

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.pruner.prune(_ReferencesOnly(study), trial)  # type: ignore[arg-type]


class _ReferencesOnly:
    """A study whose COMPLETE trials are its references only (everything else is the study's own)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[optuna.trial.FrozenTrial]:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if t.state != optuna.trial.TrialState.COMPLETE or is_reference(t)]
