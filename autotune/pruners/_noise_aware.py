"""A percentile pruner that does not prune on noise (single-objective studies)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.objectives import (
    Paired,
    is_reference,
    measured_margin,
    reading_noise,
)

#: How many deviations of the paired ratio a trial must fall below the best to be pruned on paired evidence (~95%).
PAIRED_SIGMAS = 2.0


class NoiseAwarePruner(BasePruner):
    """Prune a trial whose running value is worse than a percentile of the finished trials by a margin.

    Optuna's MedianPruner prunes a trial 1% below the median. Short measurements on a shared machine
    vary by about 10% (coefficient of variation 8-11% measured for one config run five times), so a
    config as good as the median is pruned half the time, and TPE then learns it is bad. This pruner
    compares the trial's value at a step with the ``percentile``-th best value of the complete trials at
    that step (their latest value at or before it, but never better than their last value: see :func:`_bar`)
    and prunes only when the trial is worse by more than
    ``margin`` (relative). It never prunes before ``n_warmup_steps`` (strictly after), before the trial has
    reported ``min_windows`` windows, nor before ``n_startup_trials`` complete trials can be compared. Only
    feasible trials that ran to their end are compared with (:func:`~autotune.objectives.is_reference`): an oom
    or diverged trial, told COMPLETE with its partial values, never sets the bar.

    ``percentile=0`` compares with the best complete trial: a trial is stopped as soon as it is clearly
    worse than the configuration it would have to beat to be chosen.

    ``margin=None`` (the study file's default) measures it: :func:`measured_margin` of the study's
    :func:`reading_noise` of ``metric_attr`` (the first objective's stored value), :data:`PRIOR_MARGIN` until
    the study has read configurations twice. The margin is also at least the measurement's own uncertainty:
    the user attribute ``spread_attr`` (by default ``throughput_spread``, the relative half-width of the
    window-to-window ~95% interval; None for a metric it does not describe) of the trials the threshold comes
    from (the larger of the two it lies between) and of the pruned trial when known.

    **Paired evidence** (autotune/objectives/_margin.py): when the judged trial carries the anchor's block taken
    just before it (``anchor_before``: the study keeps its baseline configuration alive and measures it between
    trials), the trial is judged by the ratio of its running value to that block, against the references'
    values over the anchor's speed while each of them ran (``anchor_samples_s``); a reference without one is not
    compared. A machine that drifts 10-30% over a minute then moves both sides of every comparison alike, and a
    configuration measured in a slow phase is not pruned against one measured in a fast one. The margin is then
    the ratio's noise: the measured one of ``anchor_ratio`` (the prior until the study has read configurations
    twice), and at least twice the deviation of the ratio of one trial's reading over one anchor block and a
    reference's over two (``2·√1.5`` times one block's deviation, ``anchor_noise``), so that what the paired
    evidence cannot separate from the best is not pruned.
    """

    def __init__(
        self,
        percentile: float = 50.0,
        *,
        n_startup_trials: int = 3,
        n_warmup_steps: int = 0,
        min_windows: int = 1,
        margin: float | None = 0.1,
        spread_attr: str | None = "throughput_spread",
        metric_attr: str = "throughput_samples_s",
    ) -> None:
        if not 0 <= percentile < 100:
            raise ValueError(f"percentile must be in [0, 100), got {percentile}")
        if margin is not None and not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        self.percentile = percentile
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.min_windows = min_windows
        self.margin = margin
        self.spread_attr = spread_attr
        self.metric_attr = metric_attr

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step <= self.n_warmup_steps or len(trial.intermediate_values) < self.min_windows:
            return False
        value = trial.intermediate_values[step]
        if math.isnan(value):
            return True
        others: list[float] = []
        spreads: list[float | None] = []
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        maximize = study.direction == StudyDirection.MAXIMIZE
        before = Paired.before(trial) if self.metric_attr == "throughput_samples_s" else None
        for done in finished:
            if not is_reference(done):
                continue
            earlier = [s for s in done.intermediate_values if s <= step]
            speed = Paired.speed(done)
            if earlier and (before is None or speed is not None):
                other = _bar(done, max(earlier), maximize)
                if not math.isnan(other):
                    others.append(other if before is None or speed is None else other / speed)
                    spreads.append(self._spread(done))
        if before is not None:
            value /= before
        if len(others) < max(1, self.n_startup_trials):
            return False
        # The percentile-th best: 50 -> the median; 25 -> the value a quarter of the way from the worst.
        order = sorted(range(len(others)), key=lambda i: others[i], reverse=maximize)  # best first
        ranked = [others[i] for i in order]
        # percentile 50: the median; 25: the value a quarter of the way down from the best (keep the top 25%)
        position = (len(ranked) - 1) * self.percentile / 100
        threshold = _interpolate(ranked, position)
        around = {order[math.floor(position)], order[min(math.ceil(position), len(order) - 1)]}
        base = self.margin if self.margin is not None else self.current_margin(finished, paired=before is not None)
        margin = max([base, *(s for i in around if (s := spreads[i]) is not None)])
        own = self._spread(trial)
        if own is not None:
            margin = max(margin, own)
        block = Paired.noise(trial) if before is not None else None
        if block is not None:
            margin = max(margin, PAIRED_SIGMAS * math.sqrt(1.5) * block)
        margin = min(margin, 0.99)
        if maximize:
            return value < threshold - margin * abs(threshold)
        return value > threshold + margin * abs(threshold)

    def current_margin(self, finished: Iterable[FrozenTrial], *, paired: bool = False) -> float:
        """The margin before the trials' own spreads: as set, or measured from ``finished`` (class docstring): the
        noise of the readings, or with ``paired`` of their ratios to the anchor."""
        if self.margin is not None:
            return self.margin
        return measured_margin(reading_noise(finished, Paired.RATIO if paired else self.metric_attr))

    def _spread(self, trial: FrozenTrial) -> float | None:
        """A trial's window-to-window interval (``spread_attr``), when it has one."""
        value = trial.user_attrs.get(self.spread_attr) if self.spread_attr else None
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
            return float(value)
        return None


def _bar(trial: FrozenTrial, step: int, maximize: bool) -> float:
    """What ``trial`` sets against another at ``step``: its value then, but never better than its last one.

    A metric that improves as a trial trains (a loss) is compared at the same step. A rate does not improve
    with steps: its early windows are only noisier readings of the same speed, and a lucky one (the
    quickstart's 6,302 samples/s at step 20 of a trial that ended at 4,923) raised the bar above anything the
    configuration reached, and a configuration faster than it (5,074 at its first window) was pruned.
    """
    value = trial.intermediate_values[step]
    last = trial.intermediate_values[max(trial.intermediate_values)]
    if math.isnan(last):
        return value
    return min(value, last) if maximize else max(value, last)


def _interpolate(values: list[float], position: float) -> float:
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    frac = position - low
    return values[low] * (1 - frac) + values[high] * frac
