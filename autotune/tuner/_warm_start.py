"""Warm start: a new study first runs the best configurations of the closest earlier study in its storage.

When a study is created (its baseline queued), the other studies in the same storage are read by their
fingerprints (:func:`autotune.tuner.study_fingerprint`, the ``autotune_fingerprint`` attribute). One
trains another model, runs on another kind of device or holds another global batch
(``constraints.global_batch``, or none): its configurations are not used, and the line says so. The others are
ranked: the same fingerprint first, then the fewest differences, then the most recent. From the first that is
finished (no trial running) and measured something, the top few configurations (3, fewer when the study file's
budget leaves fewer trials after the baseline; :func:`autotune.objectives.choose`'s choice first, then its
measured configurations by median that beat its own baseline) are projected onto this study's space and queued
right after the baseline, as search trials: they count toward the budget and are scored and pruned like any
other.

Projection: a searched knob takes the earlier value when this space holds it; a number outside the range
is clipped into it, a choice this space lacks is dropped (this study's baseline value instead); knobs this
study fixes take its fixed values. The decision is stored once (``autotune_warm_start``), so a resumed
study never queues them twice, and ``autotune status`` shows its line.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.compat import optuna_private
from autotune.objectives import choose, config_key, measured_groups
from autotune.search_space import SearchSpace, TrialConfig
from autotune.spec import StudySpec
from autotune.tuner._fingerprint import Comparison, compare_fingerprints
from autotune.tuner._roles import ROLE_SEARCH
from autotune.tuner._study import FINGERPRINT_ATTR

WARM_START_ATTR = "autotune_warm_start"  # the study attribute: what the warm start did (docs/storage.md)
TOP = 3  # configurations taken from the earlier study


@dataclass(frozen=True)
class WarmStart:
    """What the warm start of a study did: ``line`` says it (None: nothing to say: off, or no earlier study);
    ``source`` is the study the configurations came from, ``differs`` what differs from it, ``configs``
    the projected configurations queued (as TrialConfig JSON) and ``notes`` what the projection changed."""

    enabled: bool
    line: str | None = None
    source: str | None = None
    differs: tuple[str, ...] = ()
    configs: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    from_trials: tuple[int, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled, "line": self.line, "source": self.source, "differs": list(self.differs),
            "enqueued": len(self.configs), "from_trials": list(self.from_trials),
            "config_keys": [config_key(c) for c in self.configs], "notes": list(self.notes),
        }


def warm_start(study: optuna.Study, spec: StudySpec, space: SearchSpace, baseline: TrialConfig) -> WarmStart:
    """Queue the best configurations of the closest earlier study after the (just queued) baseline, once per
    study; returns what was done (also stored as the ``autotune_warm_start`` attribute)."""
    if WARM_START_ATTR in study.user_attrs:  # decided when the study was created
        return _from_json(study.user_attrs[WARM_START_ATTR])
    result = plan(study, spec, space, baseline)
    for config, number in zip(result.configs, result.from_trials, strict=True):
        params = space.params_of(TrialConfig.model_validate(config))
        study.enqueue_trial(
            params, user_attrs={"role": ROLE_SEARCH, "warm_start": {"study": result.source, "trial": number}},
            skip_if_exists=False,
        )
    study.set_user_attr(WARM_START_ATTR, result.to_json())
    return result


def plan(study: optuna.Study, spec: StudySpec, space: SearchSpace, baseline: TrialConfig) -> WarmStart:
    """What :func:`warm_start` would queue, without queuing it."""
    if not spec.warm_start:
        return WarmStart(enabled=False)
    mine = study.user_attrs.get(FINGERPRINT_ATTR)
    if not isinstance(mine, dict):
        return WarmStart(enabled=True)
    storage = optuna_private.storage_of(study)
    usable: list[tuple[int, int, str, Comparison]] = []
    refused: list[tuple[str, Comparison]] = []
    for other in storage.get_all_studies():
        theirs = other.user_attrs.get(FINGERPRINT_ATTR)
        if other.study_name == study.study_name or not isinstance(theirs, dict):
            continue
        comparison = compare_fingerprints(mine, theirs)
        if comparison.usable:
            usable.append((len(comparison.close), -optuna_private.study_id(other), other.study_name, comparison))
        else:
            refused.append((other.study_name, comparison))
    baseline_key = config_key(baseline.model_dump())
    budget = spec.budget.n_trials
    top = TOP if budget is None else max(0, min(TOP, budget - 1))  # the baseline is one of the budget's trials
    for _, _, name, comparison in sorted(usable):
        source = optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())
        if source.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            continue  # not finished: another tuner is still running it (queued trials left over do not count)
        best = best_configurations(source)
        if not best:
            continue
        configs: list[dict[str, Any]] = []
        numbers: list[int] = []
        notes: list[str] = []
        keys = {baseline_key}
        for number, config in best:
            if len(configs) >= top:
                break
            projected, changed = project(space, config, baseline)
            key = config_key(projected.model_dump())
            if key in keys:
                continue
            keys.add(key)
            configs.append(projected.model_dump(mode="json"))
            numbers.append(number)
            notes.extend(f"trial {number}: {c}" for c in changed)
        line = _line(name, len(configs), comparison, notes)
        return WarmStart(True, line, name, comparison.close, tuple(configs), tuple(notes), tuple(numbers))
    if refused:
        name, comparison = refused[0]
        others = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return WarmStart(True, f"warm start: none; study {name!r}{others} trains another model, runs on another "
                               f"device or holds another global batch: {'; '.join(comparison.blocking)}")
    return WarmStart(enabled=True)


def _line(name: str, count: int, comparison: Comparison, notes: list[str]) -> str:
    how = "same machine and model" if comparison.same else "close: " + "; ".join(comparison.close)
    if count == 0:
        return f"warm start: the best configurations of study {name!r} ({how}) are this study's baseline here"
    changed = f", {len(notes)} value{'s' if len(notes) != 1 else ''} projected onto this space" if notes else ""
    plural = "s" if count != 1 else ""
    return f"warm start: {count} configuration{plural} from study {name!r} ({how}{changed}), run after the baseline"


def best_configurations(study: optuna.Study) -> list[tuple[int, dict[str, Any]]]:
    """An earlier study's best configurations, best first: its choice (:func:`autotune.objectives.choose`),
    then its other measured configurations by median of its first objective that beat its baseline's."""
    metric = study.metric_names[0] if study.metric_names else "throughput_samples_s"
    maximize = study.directions[0] == StudyDirection.MAXIMIZE
    choice = choose(study)
    groups = sorted(measured_groups(study, metric), key=lambda g: g.median, reverse=maximize)
    out: list[tuple[int, dict[str, Any]]] = []
    if choice.best is not None:
        out.append((choice.best.trials[0], dict(choice.best.config)))
    for group in groups:
        if choice.best is not None and group.config_key == choice.best.config_key:
            continue
        if choice.baseline is not None and not (
            group.median > choice.baseline.median if maximize else group.median < choice.baseline.median
        ):
            continue
        out.append((group.trials[0], dict(group.config)))
    return out


def project(space: SearchSpace, config: dict[str, Any], baseline: TrialConfig) -> tuple[TrialConfig, list[str]]:
    """``config`` (an earlier study's TrialConfig JSON) in ``space``: each searched knob keeps its value when
    the space holds it; a number outside its range is clipped, a choice the space lacks takes the baseline's
    value; fixed knobs take the space's value. Returns the configuration and what was changed."""
    theirs = space.params_of(TrialConfig.model_validate(config))
    base = space.params_of(baseline)
    params: dict[str, Any] = {}
    changed: list[str] = []
    for name, dist in space.distributions().items():
        value, how = _inside(dist, theirs.get(name))
        if value is None:
            value, _ = _inside(dist, base.get(name))
            if value is None:
                value = _first(dist)
            if name in theirs:
                changed.append(f"{name} {theirs[name]!r} is not in this space; the baseline's {value!r}")
        elif how:
            changed.append(f"{name} {theirs[name]!r} {how} to {value!r}")
        params[name] = value
    return space.suggest(optuna.trial.FixedTrial(params)), changed  # type: ignore[arg-type]


def _inside(dist: BaseDistribution, value: Any) -> tuple[Any, str]:
    """``value`` in ``dist`` (and "clipped" when it had to be moved into a range), or None when it cannot be."""
    if value is None:
        return None, ""
    if isinstance(dist, CategoricalDistribution):
        with contextlib.suppress(ValueError, TypeError):
            dist.to_internal_repr(value)
            return value, ""
        return None, ""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, ""
    if isinstance(dist, IntDistribution):
        inside = min(max(round(value), dist.low), dist.high)
        inside = dist.low + round((inside - dist.low) / dist.step) * dist.step
        if inside > dist.high:
            inside -= dist.step
        return inside, "" if inside == value else "clipped"
    if isinstance(dist, FloatDistribution):
        inside_f = min(max(float(value), dist.low), dist.high)
        if dist.step:
            inside_f = min(dist.high, dist.low + round((inside_f - dist.low) / dist.step) * dist.step)
        return inside_f, "" if inside_f == value else "clipped"
    return None, ""


def _first(dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[0]
    if isinstance(dist, (IntDistribution, FloatDistribution)):
        return dist.low
    raise TypeError(f"unsupported distribution {dist!r}")


def _from_json(stored: Any) -> WarmStart:
    if not isinstance(stored, dict):
        return WarmStart(enabled=True)
    return WarmStart(
        enabled=bool(stored.get("enabled", True)), line=stored.get("line"), source=stored.get("source"),
        differs=tuple(stored.get("differs") or ()), notes=tuple(stored.get("notes") or ()),
    )


def warm_start_line(study: optuna.Study) -> str | None:
    """The stored warm start's line (``autotune status``), None when there is none."""
    stored = study.user_attrs.get(WARM_START_ATTR)
    if not isinstance(stored, dict):
        return None
    if stored.get("enabled") is False:
        return "warm start: off (warm_start: false)"
    line = stored.get("line")
    return str(line) if line else None
