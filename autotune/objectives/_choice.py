"""The one choice of a study: the configuration autotune recommends, and the baseline it is measured against.

:func:`choose` is the only place a winner is picked. The CLI summary, ``autotune best``, ``autotune status``,
the report's headline, ``calibrate()`` and the stored ``autotune_confirmation`` attribute all show its answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.objectives._config_key import config_key
from autotune.objectives._confirmation import Group, choose_best, group_measurements

ROLE_BASELINE, ROLE_CONFIRM = "baseline", "confirm"
THROUGHPUT = "throughput_samples_s"
CONFIRMATION_ATTR = "autotune_confirmation"  # the study attribute written when the confirmation runs are done


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` found.

    ``best`` is the recommended configuration (the baseline itself when the default is best);
    ``default_is_best`` says so; ``speedup`` is best over baseline of throughput (1.0 when the default is
    chosen; None without a measured baseline or when the first objective is not throughput);
    ``confirmed`` is True once confirmation runs measured the candidates; ``candidates`` are the groups
    the choice was made among.
    """

    best: Group | None
    baseline: Group | None
    speedup: float | None
    default_is_best: bool
    confirmed: bool
    candidates: tuple[Group, ...]


def is_reference(trial: FrozenTrial) -> bool:
    """A feasible trial that ran to its end: the only kind a pruner compares with or a choice may pick.

    COMPLETE in Optuna's sense is not enough: an oom or diverged trial is told COMPLETE with its partial
    values (and infeasible constraints), so samplers that model constraints learn from it.
    """
    if trial.state != TrialState.COMPLETE:
        return False
    if trial.user_attrs.get("outcome", "complete") != "complete":
        return False
    return all(v <= 0 for v in trial.constraints.values())


def measured_groups(study: optuna.Study, metric: str) -> list[Group]:
    """Feasible complete measurements of ``metric`` grouped by configuration (every role)."""
    records = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not is_reference(t) or "config" not in t.user_attrs:
            continue
        value = t.user_attrs.get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        key = str(t.user_attrs.get("config_key") or config_key(t.user_attrs["config"]))
        records.append(
            (t.number, key, dict(t.user_attrs["config"]), float(value), t.user_attrs.get("peak_memory_mb"),
             t.user_attrs.get("loss"))
        )
    return group_measurements(records)


def _role_keys(study: optuna.Study, role: str) -> set[str]:
    return {
        str(t.user_attrs.get("config_key"))
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("role") == role and t.user_attrs.get("config_key")
    }


def _clearly_better(value: float, than: float, margin: float, maximize: bool) -> bool:
    gain = value - than if maximize else than - value
    return gain > margin * abs(than)


def choose(study: optuna.Study, metric: str | None = None, direction: str | None = None) -> Choice:
    """The study's recommendation, by the median of ``metric`` (default: the study's first objective).

    Candidates are every configuration measured feasibly to the end, the baseline included; once
    confirmation runs measured some (``confirm`` trials), only those and the baseline. ``confirmed``: the
    confirmation is done (the ``autotune_confirmation`` attribute is written).
    The best median wins (ties: lower spread, more measurements). A configuration other than the
    baseline wins only when its median beats the baseline's by more than the measured spread of
    either (``Group.spread``); otherwise the default configuration is best, and is returned.
    """
    if metric is None:
        names = study.metric_names
        metric = names[0] if names else THROUGHPUT
    if direction is None:
        direction = "maximize" if study.directions[0] == StudyDirection.MAXIMIZE else "minimize"
    groups = measured_groups(study, metric)
    baseline_keys = _role_keys(study, ROLE_BASELINE)
    baseline = next((g for g in groups if g.config_key in baseline_keys), None)
    confirmed_keys = _role_keys(study, ROLE_CONFIRM)
    candidates = [g for g in groups if g.config_key in confirmed_keys or g is baseline]
    if not any(g.config_key in confirmed_keys for g in candidates):
        candidates = groups  # no confirmation run measured anything yet
    confirmed = CONFIRMATION_ATTR in study.user_attrs and candidates is not groups
    if not candidates:
        return Choice(None, baseline, None, False, False, ())
    best = choose_best(candidates, direction)
    if baseline is not None and best is not baseline:
        margin = max(best.spread, baseline.spread)
        if not _clearly_better(best.median, baseline.median, margin, direction == "maximize"):
            best = baseline
    default_is_best = baseline is not None and best is baseline
    speedup = None
    if baseline is not None and metric == THROUGHPUT and baseline.median > 0:
        speedup = 1.0 if default_is_best else best.median / baseline.median
    return Choice(best, baseline, speedup, default_is_best, confirmed, tuple(candidates))
