"""Memory predicted before launch: a configuration predicted over the budget is told infeasible, not run.

Before a trial is launched the loop asks :func:`gate`: the configuration's peak memory per rank is predicted
from the study's finished trials (:class:`autotune.objectives.MemoryModel`; before any trial, from the
parameter count and dtype mix of the study's fingerprint) and stored on the trial as ``predicted_memory_mb``
(with its configuration's attributes, in one transaction: :func:`prediction_attrs`).
With ``constraints.max_memory_mb`` set, a search trial predicted over it by more than the model's own error
is not launched: it is told as an oom trial that measured nothing (``launched`` false, the reason
``not launched: predicted 9.1 GB > 8 GB budget, from 4 trials (setting fit)``), with the constraint values
of such an oom, so the sampler learns from it as from a measured one. The baseline, confirmation runs and
retries are always launched; ``constraints.predict_memory: false`` launches every trial (the prediction is
still stored).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.objectives import MemoryModel, MemoryPrediction, ModelSize, memory_points
from autotune.search_space import mesh_label
from autotune.spec import StudySpec
from autotune.trial_result import Outcome, TrialResult
from autotune.tuner._roles import ROLE_SEARCH

__all__ = ["NOT_LAUNCHED", "gate", "model_size", "not_launched", "predict_memory", "prediction_attrs"]

NOT_LAUNCHED = "not launched: "  # the reason's prefix of a trial predicted over the memory budget
FINGERPRINT_ATTR = "autotune_fingerprint"  # the study's context (docs/storage.md): workload.parameters, dtypes
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}

Tell = Callable[[optuna.Study, optuna.Trial, TrialResult], None]


def model_size(study: optuna.Study) -> ModelSize | None:
    """The trainable parameters and their mean bytes, from the study's fingerprint (None without one);
    gradients and Adam's two moments in the parameters' dtype."""
    workload = (study.user_attrs.get(FINGERPRINT_ATTR) or {}).get("workload") or {}
    params = workload.get("parameters")
    if not isinstance(params, int) or params <= 0:
        return None
    shares = workload.get("dtypes") or {"float32": 1.0}
    per = sum(float(share) * DTYPE_BYTES.get(str(name), 4) for name, share in shares.items()) or 4.0
    return ModelSize(params, param_bytes=round(per), grad_bytes=round(per), optimizer_bytes=round(2 * per))


def predict_memory(spec: StudySpec, study: optuna.Study, config: Mapping[str, Any]) -> MemoryPrediction | None:
    """``config``'s predicted peak per rank from the study's finished trials (None when nothing is known)."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    model = MemoryModel(memory_points(finished, spec.constraints.max_memory_mb), size=model_size(study))
    return model.predict(config)


def prediction_attrs(prediction: MemoryPrediction | None) -> dict[str, Any]:
    """The user attributes that store a trial's prediction, written with its configuration (one transaction)."""
    return {
        "predicted_memory_mb": None if prediction is None else round(prediction.mb, 1),
        "predicted_memory_error_mb": None if prediction is None else round(prediction.error_mb, 1),
    }


def gate(
    spec: StudySpec, study: optuna.Study, trial: optuna.Trial, prediction: MemoryPrediction | None, role: str,
    trial_dir: Path, tell: Tell,
) -> TrialResult | None:
    """Tell ``trial`` infeasible and return its result when it is not to be launched (a search trial whose
    ``prediction``, stored with its configuration, is over the budget by more than the error), else None."""
    budget = spec.constraints.max_memory_mb
    first_run = role == ROLE_SEARCH and "retry_of" not in trial.user_attrs
    if not spec.constraints.predict_memory:
        budget = None  # predicted and stored, but every trial is launched and measures for itself
    if budget is None or prediction is None or not first_run or not prediction.over(budget):
        return None
    reason = NOT_LAUNCHED + prediction.describe(budget)
    config = trial.user_attrs.get("config") or {}
    if int(config.get("world_size") or 1) > 1:  # which mesh (pp x dp x tp) was skipped
        reason += f", mesh {mesh_label(config)}"
    result = TrialResult(outcome=Outcome.OOM, reason=reason, trial_dir=str(trial_dir))
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
    trial.set_user_attr("launched", False)
    tell(study, trial, result)
    return result


def not_launched(study: optuna.Study) -> list[int]:
    """The numbers of the trials not launched because they were predicted over the memory budget."""
    return [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("launched") is False]
