"""The study as the default GP sees it: pruned trials as measurements, failures that recur as infeasible, which
configurations count as measured, and the least noise the objective's fit may claim."""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.compat import optuna_private
from autotune.objectives import MIN_NOISE_DF, Paired, pooled_sd

#: How ``optuna.Trial.set_constraint`` stores a constraint: a system attribute under this prefix.
CONSTRAINTS_PREFIX = "constraints:"

#: Optuna's own least noise variance of a GP fit (optuna._gp.prior.DEFAULT_MINIMUM_NOISE_VAR).
DEFAULT_MINIMUM_NOISE_VAR = 1e-6
#: The most the measured noise may claim of the standardized values' unit variance: a fit whose floor
#: reached 1 would call every difference noise, and Optuna's default fit starts from a noise variance of 1.
MAX_NOISE_FLOOR = 0.5


def noise_floor(fitted: list[FrozenTrial]) -> float:
    """The least noise variance the objective's GP may fit, in the standardized values it fits: the study's
    reading noise where configurations were read more than once (the pooled relative deviation of
    :func:`autotune.objectives.pooled_sd`, over at least ``MIN_NOISE_DF`` degrees of freedom), as a variance
    relative to the spread of the values fitted: ``(sd · mean / std)²``, at most :data:`MAX_NOISE_FLOOR`.
    Optuna's own floor (1e-6) otherwise, and for values that are not all positive.

    Fitted freely, a GP on a dozen noisy readings can explain a lucky one as a peak and spend the next
    trials beside it; with the floor it treats two readings of one configuration that differ by the noise as
    one value with that noise, as they are."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    values = [t.values[0] for t in fitted if t.values and math.isfinite(t.values[0])]
    if len(values) < 3 or min(values) <= 0:
        return DEFAULT_MINIMUM_NOISE_VAR
    for t in fitted:
        if t.values and math.isfinite(t.values[0]):
            groups.setdefault(tuple(sorted(t.params.items(), key=lambda kv: kv[0])), []).append(t.values[0])
    pooled = pooled_sd(groups.values())
    spread = float(np.std(values))
    if pooled is None or pooled.df < MIN_NOISE_DF or spread <= 0:
        return DEFAULT_MINIMUM_NOISE_VAR
    return min(MAX_NOISE_FLOOR, max(DEFAULT_MINIMUM_NOISE_VAR, (pooled.sd * float(np.mean(values)) / spread) ** 2))


def fitted_search_space(view: WithPartial) -> dict[str, BaseDistribution]:
    """The distributions (of more than one value) that every trial the GP fits has, identically; of the trials
    queued with their parameters fixed (:func:`queued`: the baseline, a warm start), only when the sampler has
    proposed none yet. A queued trial that lacks one of them is left out of the fit (``WithPartial(space=...)``)
    rather than the knob out of the model: the baseline runs the workload's defaults, and where one lies outside
    its knob's range (``threads_per_rank: auto`` beside ``{low: 1, high: 2}``) that knob was left out of the GP
    for the whole study and drawn at random at every ask (the large landscape: threads 2, 0.66x threads 1 by
    the median, in 49% of the GP's trials)."""
    fitted = view.fitted()
    space: dict[str, BaseDistribution] | None = None
    for t in [t for t in fitted if not queued(t)] or fitted:
        if space is None:
            space = dict(t.distributions)
        else:
            space = {name: d for name, d in space.items() if t.distributions.get(name) == d}
    return {name: d for name, d in sorted((space or {}).items()) if not d.single()}


#: Outcomes of FAIL trials that say something about the configuration: it fails again if re-run.
RECURRING_FAILURES = ("crashed", "timeout", "hang")


def fails_again(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.FAIL and trial.user_attrs.get("outcome") in RECURRING_FAILURES


ABSENT = object()  # a parameter a trial lacks: equal to no value


def queued(trial: FrozenTrial) -> bool:
    """Whether ``trial`` was queued with its parameters fixed (``study.enqueue_trial``), not proposed."""
    return "fixed_params" in trial.system_attrs


def others_of(study: optuna.Study, trial: FrozenTrial) -> list[FrozenTrial]:
    """The other trials whose configurations count as measured: finished, running, or failed for a reason
    that recurs."""
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.FAIL)
    return [
        other for other in optuna_private.trials_of(study, states)
        if other.number != trial.number and (other.state != TrialState.FAIL or fails_again(other))
    ]


def measured(others: list[FrozenTrial], params: dict[str, Any]) -> bool:
    """Whether one of ``others`` (:func:`others_of`) already has these values of these parameters."""
    return any(
        all(name in other.params and other.params[name] == value for name, value in params.items())
        for other in others
    )


def ordinal_choices(space: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """The knobs of ``space`` whose choices are three or more numbers (``batch_size: {choices: [32, 64, 128,
    256]}``), each with its choices in ascending order. The GP models them as ordered (the index in that order,
    an integer range) rather than as categories: a category is as far from every other, so a model that saw
    64 beat 32 could not lean towards 128, and a 15-trial study of the MLP's grid (batch 16-256 as choices)
    spent its last 11 trials at batch 64 while the grid's best ran 256."""
    out: dict[str, list[Any]] = {}
    for name, dist in space.items():
        if not isinstance(dist, CategoricalDistribution) or len(dist.choices) < 3:
            continue
        if all(isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) for c in dist.choices):
            out[name] = sorted(dist.choices)
    return out


def as_ordinal(space: dict[str, BaseDistribution], ordinal: dict[str, list[Any]]) -> dict[str, BaseDistribution]:
    """``space`` with each knob of ``ordinal`` as the integer range of its choices' indices."""
    return {name: IntDistribution(0, len(ordinal[name]) - 1) if name in ordinal else d for name, d in space.items()}


def to_ordinal(params: dict[str, Any], ordinal: dict[str, list[Any]]) -> dict[str, Any]:
    return {name: ordinal[name].index(v) if name in ordinal and v in ordinal[name] else v
            for name, v in params.items()}


def from_ordinal(params: dict[str, Any], ordinal: dict[str, list[Any]]) -> dict[str, Any]:
    return {name: ordinal[name][int(v)] if name in ordinal else v for name, v in params.items()}


class WithPartial:
    """A study as the GP sees it: its pruned trials (with a finite last value) listed as complete, and its
    trials that failed for a reason that recurs listed as complete and infeasible; the knobs of ``ordinal``
    (:func:`ordinal_choices`) as the indices of their values. Given the GP's ``space``, a trial that lacks one
    of its knobs, or has it with other values, is left out (a queued one: :func:`fitted_search_space`)."""

    def __init__(self, study: optuna.Study, ordinal: dict[str, list[Any]] | None = None,
                 space: dict[str, BaseDistribution] | None = None) -> None:
        self._study = study
        self._ordinal = ordinal or {}
        self._space = space or {}
        self._read: list[FrozenTrial] | None = None  # the study's trials, read once for this view (one ask)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def fitted(self) -> list[FrozenTrial]:
        """The trials the GP fits (listed as complete)."""
        return self._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))

    def _get_trials(  # what GPSampler calls on the study (optuna_private.trials_of's name)
        self, deepcopy: bool = True, states: Any = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        if deepcopy:
            trials = optuna_private.trials_of(self._study, None, use_cache=use_cache, deepcopy=True)
        else:  # the noise floor's and GPSampler's reads of one ask share one read of the storage
            if self._read is None:
                self._read = optuna_private.trials_of(self._study, None, use_cache=use_cache)
            trials = self._read
        wanted = None if states is None else tuple(states)
        # GPSampler needs the same constraints on every trial it fits. autotune records a pruned trial's
        # constraints as measured; one pruned before that (an older study) counts as feasible: a trial over
        # the memory budget ends as oom, not pruned.
        names = _informative(trials, {n for t in trials if t.state == TrialState.COMPLETE for n in _constraints(t)})
        worst = _worst(self._study, trials)
        out: list[FrozenTrial] = []
        for t in trials:
            partial = None
            if t.state == TrialState.PRUNED:
                partial = _as_complete(t, names)
            elif fails_again(t):
                partial = _as_failed(t, names, worst)
            if partial is not None and (wanted is None or TrialState.COMPLETE in wanted):
                out.append(partial)
            elif partial is None and (wanted is None or t.state in wanted):
                out.append(_ordered(t, names) if t.state == TrialState.COMPLETE else t)
        out = [t for t in on_anchor(out) if all(t.distributions.get(n) == d for n, d in self._space.items())]
        return [self._encoded(t) for t in out] if self._ordinal else out

    def _encoded(self, trial: FrozenTrial) -> FrozenTrial:
        """``trial`` (a copy) with its ordinal knobs' values as indices, in ranges."""
        if not self._ordinal.keys() & trial.params.keys():
            return trial
        encoded = copy.copy(trial)
        encoded.params = to_ordinal(trial.params, self._ordinal)
        encoded.distributions = {**trial.distributions, **as_ordinal(
            {n: d for n, d in trial.distributions.items() if n in self._ordinal}, self._ordinal)}
        return encoded


def on_anchor(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """In a paired study (autotune/objectives/_margin.py) the complete trials' values as the GP fits them: each
    trial's ratio to the anchor measured with it (``anchor_ratio``), so that a configuration read in a slow phase
    of the machine is not modelled as a slow configuration; a trial without one (a confirmation, a failure fitted
    at the worst value) over the anchor's median speed; a pruned trial's windows (what TPE reads of it) over the
    anchor's speed around it. Unchanged in a study that is not paired. The objective values stored on the
    trials, which a user reads, stay samples/s: only the model's copies change."""
    speeds = [s for t in trials if (s := Paired.speed(t)) is not None]
    if not speeds:
        return trials
    typical = statistics.median(speeds)
    out = []
    for t in trials:
        if t.state == TrialState.PRUNED and t.intermediate_values:  # as TPE reads a pruned trial: its windows
            anchor = Paired.speed(t) or Paired.before(t) or typical
            pruned = copy.copy(t)
            pruned.intermediate_values = {step: v / anchor for step, v in t.intermediate_values.items()}
            out.append(pruned)
            continue
        if t.state != TrialState.COMPLETE or not t.values or not math.isfinite(t.values[0]):
            out.append(t)
            continue
        ratio = Paired.ratio(t)
        fitted = copy.copy(t)  # never change the storage's cached trial
        fitted.values = [ratio if ratio is not None else t.values[0] / typical]
        out.append(fitted)
    return out


class OnAnchor:
    """A study as TPE sees it past the GP's hand-over: its trials' values and a pruned trial's windows as ratios
    to the anchor measured with them (:func:`on_anchor`), as the GP fits them before it."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(  # what TPESampler calls on the study
        self, deepcopy: bool = True, states: Any = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        return on_anchor(optuna_private.trials_of(self._study, states, use_cache=use_cache, deepcopy=deepcopy))


def _informative(trials: list[FrozenTrial], names: set[str]) -> set[str]:
    """The constraints worth a GP of their own: not one that every trial met with the same value (``memory``
    without a budget is -1 on every feasible trial, ``diverged`` 0 until a trial diverges). A constant column
    tells the model nothing about where the space is infeasible, and each constraint is a GP fitted and
    evaluated at every point: leaving out the quickstart's two took its ask at 13 trials from 0.13 to 0.10 s.
    A trial that failed for a recurring reason is infeasible on every constraint, so the constraints come back
    with it."""
    if any(fails_again(t) for t in trials):
        return names
    kept = set()
    for name in names:
        values = {t.system_attrs.get(name, 0.0) for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
        if len(values) > 1 or any(v > 0 for v in values):
            kept.add(name)
    return kept


def _worst(study: optuna.Study, trials: list[FrozenTrial]) -> float | None:
    """The worst objective value measured, the value of a failure that measured nothing: over complete trials and
    pruned ones at their last reported value, as the GP fits them. With the pruner most trials end pruned; the
    complete ones alone are the best few, and a failure fitted at the worst of them read as a fair configuration
    (the large landscape: after three bf16 timeouts fitted at the baseline's speed, the best complete reading, the
    GP proposed four more bf16 configurations, each of which timed out)."""
    values = [t.values[0] for t in trials if t.state == TrialState.COMPLETE and t.values and math.isfinite(t.values[0])]
    values += [t.intermediate_values[t.last_step] for t in trials
               if t.state == TrialState.PRUNED and t.last_step is not None
               and math.isfinite(t.intermediate_values[t.last_step])]
    if not values:
        return None
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return min(values) if maximize else max(values)


def _as_failed(trial: FrozenTrial, constraint_names: set[str], worst: float | None) -> FrozenTrial | None:
    """A failed trial as an infeasible complete one: its last reported value, else the worst measured.
    Without constraints to mark it infeasible, it gets the worst value."""
    step = trial.last_step
    value = trial.intermediate_values[step] if step is not None else None
    if value is None or not math.isfinite(value) or not constraint_names:
        value = worst
    if value is None:
        return None
    failed = _ordered(trial, constraint_names, force=1.0)
    failed.state = TrialState.COMPLETE
    failed.values = [value]
    return failed


def _ordered(trial: FrozenTrial, names: set[str], *, force: float | None = None) -> FrozenTrial:
    """``trial`` with the constraints ``names`` in one order (GPSampler reads them as columns): its own
    values, 0 (feasible) for one it lacks, or ``force`` for every one."""
    own = {k: v for k, v in trial.system_attrs.items() if k.startswith(CONSTRAINTS_PREFIX)}
    if force is None and list(own) == sorted(names):
        return trial
    copied = copy.copy(trial)
    copied.system_attrs = {k: v for k, v in trial.system_attrs.items() if not k.startswith(CONSTRAINTS_PREFIX)}
    for name in sorted(names):
        copied.system_attrs[name] = force if force is not None else own.get(name, 0.0)
    return copied


def _constraints(trial: FrozenTrial) -> list[str]:
    return [key for key in trial.system_attrs if key.startswith(CONSTRAINTS_PREFIX)]


def _as_complete(trial: FrozenTrial, constraint_names: set[str]) -> FrozenTrial | None:
    step = trial.last_step
    if step is None:
        return None
    value = trial.intermediate_values[step]
    if not math.isfinite(value):
        return None
    partial = copy.copy(_ordered(trial, constraint_names))  # never change the storage's cached trial
    partial.state = TrialState.COMPLETE
    partial.values = [value]
    return partial
