"""Reading a study's results back: its measured configurations, its one choice and the summary of it.

The choice is :func:`autotune.objectives.choose`'s, the one module that picks the winner: the summary
here, the confirmation record, ``calibrate()``, ``best`` and the report all read it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from autotune.objectives import Choice, Group, choose
from autotune.objectives import measured_groups as _measured_groups
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec, held_global_batches, stored_global_batches
from autotune.tuner._roles import FINISHED, ROLE_CONFIRM


@dataclass
class TuneSummary:
    """The state of a study: the chosen configuration (:func:`autotune.objectives.choose`), how it was
    measured, and the trial counts. ``default_is_best``: the baseline (the default configuration) is the
    choice, because nothing beat it by more than the measured spread."""

    study: optuna.Study
    best_config: TrialConfig | None
    best_trial: int | None
    best: Group | None
    baseline: Group | None
    speedup: float | None
    confirmed: bool
    counts: dict[str, int] = field(default_factory=dict)
    pareto_trials: list[int] = field(default_factory=list)
    default_is_best: bool = False
    statement: str | None = None  # Choice.statement(): "best by X% (± Y%) over #N" or "tied within noise with ..."
    speedup_half_width: float | None = None  # relative: the speed-up is speedup x (1 ± this)
    left_out: tuple[int, ...] = ()  # the baseline's far-off first trial, re-measured rather than averaged in
    advice: str | None = None  # Choice.advice: a race left its two leaders tied; what more rounds would take
    global_batch_held: tuple[int, ...] = ()  # constraints.global_batch: every trial ran one of these global batches
    # Another run sharing the study holds its confirmation now (who, in words): this choice is not confirmed yet.
    confirming_elsewhere: str | None = None

    @property
    def metric(self) -> str:
        return "throughput_samples_s"


def measured_groups(study: optuna.Study, spec: StudySpec) -> list[Group]:
    """Feasible complete measurements grouped by configuration (search, baseline and confirm trials)."""
    return _measured_groups(study, spec.objectives[0].key)


def chosen(study: optuna.Study, spec: StudySpec) -> Choice:
    """The study's choice (:func:`autotune.objectives.choose`) by the study file's first objective."""
    first = spec.objectives[0]
    return choose(study, first.key, first.direction or "maximize")


def summarize(study: optuna.Study, spec: StudySpec, *, confirming_elsewhere: bool = False) -> TuneSummary:
    """What the study has found so far: its one choice (confirmed once confirmation runs measured it).
    ``confirming_elsewhere``: another run sharing the study held its confirmation lock when this one finished."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        if t.state in FINISHED:
            outcome = str(t.user_attrs.get("outcome", t.state.name.lower()))
            counts[outcome] = counts.get(outcome, 0) + 1
        else:
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    choice = chosen(study, spec)
    best = choice.best
    pareto: list[int] = []
    if len(spec.objectives) > 1:
        with contextlib.suppress(Exception):
            pareto = [t.number for t in study.best_trials]
    return TuneSummary(
        study=study,
        best_config=TrialConfig.model_validate(best.config) if best else None,
        best_trial=best.trials[0] if best else None,
        best=best,
        baseline=choice.baseline,
        speedup=choice.speedup,
        confirmed=choice.confirmed,
        counts=counts,
        pareto_trials=pareto,
        default_is_best=choice.default_is_best,
        statement=choice.statement(),
        speedup_half_width=choice.speedup_half_width,
        left_out=choice.left_out,
        advice=choice.advice,
        global_batch_held=_held(study, spec),
        confirming_elsewhere=_confirmer(study) if confirming_elsewhere and not choice.confirmed else None,
    )


def _confirmer(study: optuna.Study) -> str:
    """The run confirming the study now, in words: its pid and host once one of its confirmation runs started."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker")
        if t.user_attrs.get("role") == ROLE_CONFIRM and isinstance(worker, dict):
            return f"another autotune run (pid {worker.get('pid')} on {worker.get('host')})"
    return "another autotune run"


def _held(study: optuna.Study, spec: StudySpec) -> tuple[int, ...]:
    """The global batches the study held: as its stored study file says (what it ran with, whatever the file says
    now), else as ``spec`` says."""
    stored = study.user_attrs.get("autotune")
    held = stored_global_batches(stored.get("spec") if isinstance(stored, dict) else None)
    return held if held is not None else held_global_batches(spec.constraints.global_batch)
