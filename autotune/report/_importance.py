"""Which knobs matter: Optuna's parameter importances per objective."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.report._records import metric_names, objective_directions


class ImportanceData(NamedTuple):
    """Parameter importances per objective (fractions summing to 1), or a note saying why there are none."""

    importances: list[tuple[str, dict[str, float]]]  # (metric, {param: importance})
    note: str | None


def importance_data(study: optuna.Study) -> ImportanceData:
    """optuna.importance over COMPLETE trials; needs at least 2 of them and 1 searched parameter."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = {name for t in complete for name in t.params}
    if len(complete) < 2:
        return ImportanceData([], f"parameter importances need at least 2 complete trials (this study has "
                                  f"{len(complete)})")
    if not params:
        return ImportanceData([], "parameter importances need a searched parameter; every knob is fixed")
    out: list[tuple[str, dict[str, float]]] = []
    single = len(study.directions) == 1
    cautions: list[str] = []
    for index, (metric, direction) in enumerate(zip(metric_names(study), objective_directions(study), strict=True)):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                target = None if single else _objective(index, direction)
                values = optuna.importance.get_param_importances(study, target=target)
        except (ValueError, RuntimeError, ZeroDivisionError) as e:
            return ImportanceData(out, f"parameter importances could not be computed: {e}")
        out.append((metric, dict(values)))
        # PED-ANOVA's caveats (few trials in a regime) belong beside the figure, not on the terminal. Its
        # warning that it rates LOW target values is answered by _objective, which negates maximized ones.
        for w in caught:
            text = str(w.message).strip()
            if "low `target` values" not in text and text not in cautions:
                cautions.append(text)
    return ImportanceData(out, "; ".join(cautions) if cautions else None)


def _objective(index: int, direction: str) -> Callable[[FrozenTrial], float]:
    """The objective as a value to minimize: optuna.importance's default evaluator (PED-ANOVA) rates
    parameters by how they reach LOW target values, so a maximized objective is negated."""
    sign = -1.0 if direction == "maximize" else 1.0

    def target(trial: FrozenTrial) -> float:
        return sign * trial.values[index]

    return target
