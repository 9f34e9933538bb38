"""Parse a study's trials once into typed records (docs/storage.md is the contract read here).

Every view of the report is computed from :class:`TrialRecord` objects, never from raw user attributes,
so an attribute a tuner did not write (an older study, a trial killed before it was told) becomes a
``None`` here, in one place, instead of a ``KeyError`` in a figure.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.knobs import KNOBS

__all__ = ["TrialRecord", "Window", "metric_names", "objective_directions", "trial_records"]

# The metric a study-file objective is stored under, and the direction it naturally has.
METRIC_UNITS = {
    "throughput_samples_s": "samples/s", "peak_memory_mb": "MB", "loss": "", "eval_loss": "", "time_to_loss_s": "s"
}


@dataclass(frozen=True)
class Window:
    """One reporting window of a trial (the ``windows`` user attribute)."""

    step: int
    throughput_samples_s: float | None
    peak_memory_mb: float | None
    loss: float | None


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a study, whatever its state, with the attributes the tuner stored on it."""

    number: int
    state: TrialState
    role: str  # baseline | search | confirm | "" when the tuner wrote none
    outcome: str  # complete | pruned | oom | diverged | crashed | timeout | hang | interrupted | running
    reason: str
    config: Mapping[str, Any]
    params: Mapping[str, Any]
    values: tuple[float, ...] | None
    throughput_samples_s: float | None
    peak_memory_mb: float | None
    loss: float | None
    time_to_first_step_s: float | None
    wall_s: float | None
    steps: int | None
    constraints: Mapping[str, float]
    intermediate: tuple[tuple[int, float], ...]
    windows: tuple[Window, ...]
    start: datetime.datetime | None
    end: datetime.datetime | None
    trial_dir: str = ""
    error_lines: tuple[str, ...] = field(default_factory=tuple)
    confirms: int | None = None
    eval_loss: float | None = None
    time_to_loss_s: float | None = None
    compile_s: float | None = None  # torch.compile's seconds in the warm-up (compile knob)
    threads_resolved: int | None = None  # the threads each rank ran with (threads_per_rank, auto resolved)
    predicted_memory_mb: float | None = None  # predicted before launch (tuner/_memory.py), and its error
    predicted_memory_error_mb: float | None = None
    launched: bool = True  # False: predicted over the memory budget, never run

    @property
    def feasible(self) -> bool | None:
        """True/False for a COMPLETE trial (all constraints <= 0), None for any other state."""
        if self.state != TrialState.COMPLETE:
            return None
        return all(v <= 0 for v in self.constraints.values())

    def knob(self, name: str) -> Any:
        """A knob's value: from the stored config, else from the sampled params, else None. A hyperparameter
        (``hp.<name>``) reads the config's ``hyperparameters``, so a baseline outside the range shows too."""
        if name in self.config:
            return self.config[name]
        env = self.config.get("env")
        if name.startswith("env.") and isinstance(env, Mapping):
            return env.get(name[4:])  # None: the variable was left unset (the baseline's)
        hyperparameters = self.config.get("hyperparameters")
        if name.startswith("hp.") and isinstance(hyperparameters, Mapping) and name[3:] in hyperparameters:
            value = hyperparameters[name[3:]]
            return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
        return self.params.get(name)

    def metric(self, key: str) -> float | None:
        """``throughput_samples_s``, ``peak_memory_mb`` or ``loss`` as measured (partial ones included)."""
        value = getattr(self, key, None) if key in METRIC_UNITS else None
        return value if isinstance(value, float) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _windows(raw: Any) -> tuple[Window, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for row in raw:
        if isinstance(row, (list, tuple)) and len(row) >= 4 and _int(row[0]) is not None:
            out.append(Window(row[0], _number(row[1]), _number(row[2]), _number(row[3])))
    return tuple(out)


def _default_outcome(state: TrialState) -> str:
    return {
        TrialState.COMPLETE: "complete",
        TrialState.PRUNED: "pruned",
        TrialState.FAIL: "crashed",
        TrialState.RUNNING: "running",
        TrialState.WAITING: "waiting",
    }[state]


def record_of(trial: FrozenTrial) -> TrialRecord:
    """The :class:`TrialRecord` of one Optuna trial."""
    attrs = trial.user_attrs
    config = attrs.get("config")
    outcome = attrs.get("outcome")
    if trial.state in (TrialState.RUNNING, TrialState.WAITING):
        outcome = _default_outcome(trial.state)  # the tuner writes the outcome when the trial ends
    values = tuple(float(v) for v in trial.values) if trial.values is not None else None
    errors = attrs.get("error_lines")
    return TrialRecord(
        number=trial.number,
        state=trial.state,
        role=str(attrs.get("role") or ""),
        outcome=str(outcome or _default_outcome(trial.state)),
        reason=str(attrs.get("reason") or ""),
        config=dict(config) if isinstance(config, Mapping) else {},
        params=dict(trial.params),
        values=values,
        throughput_samples_s=_number(attrs.get("throughput_samples_s")),
        peak_memory_mb=_number(attrs.get("peak_memory_mb")),
        loss=_number(attrs.get("loss")),
        time_to_first_step_s=_number(attrs.get("time_to_first_step_s")),
        wall_s=_number(attrs.get("wall_s")),
        steps=_int(attrs.get("steps")),
        constraints=dict(trial.constraints),
        intermediate=tuple(sorted((int(k), float(v)) for k, v in trial.intermediate_values.items())),
        windows=_windows(attrs.get("windows")),
        start=trial.datetime_start,
        end=trial.datetime_complete,
        trial_dir=str(attrs.get("trial_dir") or ""),
        error_lines=tuple(str(x) for x in errors) if isinstance(errors, list) else (),
        confirms=_int(attrs.get("confirms")),
        eval_loss=_number(attrs.get("eval_loss")),
        time_to_loss_s=_number(attrs.get("time_to_loss_s")),
        compile_s=_number(attrs.get("compile_s")),
        threads_resolved=_int(attrs.get("threads_per_rank")),
        predicted_memory_mb=_number(attrs.get("predicted_memory_mb")),
        predicted_memory_error_mb=_number(attrs.get("predicted_memory_error_mb")),
        launched=attrs.get("launched") is not False,
    )


def trial_records(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the study, in number order."""
    return [record_of(t) for t in study.get_trials(deepcopy=False)]


def metric_names(study: optuna.Study) -> list[str]:
    """The stored metric name of each objective (``throughput_samples_s``, ...); ``objective N`` if unset."""
    names = study.metric_names
    if names is None:
        return [f"objective {i}" for i in range(len(study.directions))]
    return list(names)


def objective_directions(study: optuna.Study) -> list[str]:
    """``maximize`` or ``minimize`` per objective."""
    return ["maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize" for d in study.directions]


def searched_knobs(records: Sequence[TrialRecord]) -> list[str]:
    """The knobs any trial sampled (its Optuna params), in the knob table's order."""
    seen = {name for r in records for name in r.params}
    return [name for name in KNOBS if name in seen] + sorted(seen - set(KNOBS))


def finite_float(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def value_label(value: Any) -> str:
    """How a knob's value is labelled: ``true``/``false`` for booleans, else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
