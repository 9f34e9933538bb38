"""Time to a target loss: throughput and statistical efficiency joined in one number.

A trial measures two things: how fast it runs (``throughput_samples_s``, whole steps after the warm-up)
and how its loss falls with the samples it has seen (one mean loss per reporting window). The time to
reach a target loss is

    time_to_loss_s = samples needed to reach the target / throughput_samples_s

— the seconds of training (start-up excluded) the configuration needs, as Pollux's goodput frames it: a
batch that runs 2x faster but needs 3x the samples takes 1.5x the time, and loses.

The samples needed are read off the loss curve. Each window's loss is the mean over its steps, placed at
the middle of the window (in samples seen, warm-up included).

- ``reached``: a window's loss is at or below the target; the crossing is interpolated linearly between
  it and the window before.
- ``extrapolated``: the trial ended above the target; a line ``loss = a + b ln(samples)`` is fitted by
  least squares to the last half of the windows (at least 3 when there are, at least 2) and solved for
  the target. The uncertainty is the slope's standard error: ``time_to_loss_low_s`` and
  ``time_to_loss_high_s`` are the solutions with the slope one standard error steeper and flatter
  (``high`` is infinite when the flatter slope no longer falls).
- ``unreachable``: the curve does not fall (slope >= 0), or the solution lies beyond
  ``HORIZON`` times the samples the trial saw. The value is then the time of ``HORIZON`` times the
  trial's samples, times ``last loss / target`` (so a trial that ends nearer the target still ranks
  better), finite so that Optuna can rank it.

The throughput's own noise is not part of the interval; confirmation runs measure it. While a trial runs,
:class:`RunningTimeToLoss` gives the same estimate from the windows so far: the intermediate value the
pruner compares with other trials' at the same step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from autotune.trial_result import TrialResult, Window

HORIZON = 100.0  # extrapolating beyond 100x the samples a trial saw is not a measurement
Status = Literal["reached", "extrapolated", "unreachable"]


@dataclass(frozen=True)
class TimeToLoss:
    """The estimate for one trial: seconds, the samples behind them, and how they were found."""

    seconds: float
    samples: float
    status: Status
    low_s: float  # == seconds when reached
    high_s: float  # may be inf for an extrapolation whose flatter slope never reaches the target

    def attrs(self) -> dict[str, Any]:
        """The trial user attributes (docs/storage.md): ``time_to_loss_s`` and its details."""
        return {
            "time_to_loss_s": self.seconds,
            "time_to_loss_status": self.status,
            "time_to_loss_samples": round(self.samples, 1),
            "time_to_loss_low_s": self.low_s,
            "time_to_loss_high_s": None if math.isinf(self.high_s) else self.high_s,
        }

    def describe(self) -> str:
        """``12.3 s (reached)`` or ``40 s (extrapolated, 25-90 s)``."""
        if self.status == "reached":
            return f"{self.seconds:.3g} s (reached)"
        high = "inf" if math.isinf(self.high_s) else f"{self.high_s:.3g}"
        return f"{self.seconds:.3g} s ({self.status}, {self.low_s:.3g}-{high} s)"


def loss_curve(windows: Sequence[Window], warmup_steps: int | None = None) -> list[tuple[float, float]]:
    """``(samples at the window's middle, window loss)`` per window with a finite loss.

    A window covers the steps after the previous window's (the first: after the warm-up — the trial's own,
    as its windows record it, else ``warmup_steps``; when neither is known it is taken to be as long as the
    second window).
    """
    points: list[tuple[float, float]] = []
    previous: float | None = None
    if windows and windows[0].warmup_steps is not None:
        warmup_steps = windows[0].warmup_steps
    for i, w in enumerate(windows):
        per_step = w.samples / w.step if w.step > 0 else 0.0
        if previous is None:
            if warmup_steps is not None:
                previous = float(warmup_steps)
            elif len(windows) > 1:
                previous = max(0.0, w.step - (windows[1].step - w.step))
            else:
                previous = 0.0
        start = previous if i == 0 else float(windows[i - 1].step)
        if math.isfinite(w.loss):
            points.append(((start + w.step) / 2 * per_step, float(w.loss)))
    return points


def samples_to_loss(points: Sequence[tuple[float, float]], target: float) -> tuple[float, float, float, Status]:
    """``(samples, low, high, status)`` to reach ``target`` on a loss curve of ``(samples, loss)`` points."""
    if not points:
        raise ValueError("no loss measured; a time to loss needs at least one window")
    for i, (samples, loss) in enumerate(points):
        if loss <= target:
            if i == 0:
                return samples, samples, samples, "reached"
            s0, l0 = points[i - 1]
            crossing = s0 + (samples - s0) * (l0 - target) / (l0 - loss) if l0 != loss else samples
            return crossing, crossing, crossing, "reached"
    seen = points[-1][0]
    cap = HORIZON * seen
    tail = list(points[-max(min(3, len(points)), len(points) // 2):])
    fit = _log_fit(tail)
    if fit is None:
        return cap, cap, math.inf, "unreachable"
    mean_x, mean_y, slope, stderr = fit
    if slope >= 0:
        return cap, cap, math.inf, "unreachable"

    def solve(b: float) -> float:
        if b >= 0:
            return math.inf
        exponent = mean_x + (target - mean_y) / b
        return math.exp(exponent) if exponent < 700 else math.inf

    estimate = solve(slope)
    if estimate > cap:
        return cap, cap, math.inf, "unreachable"
    low, high = solve(slope - stderr), solve(slope + stderr)
    return estimate, min(low, estimate), max(high, estimate), "extrapolated"


def _log_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float, float] | None:
    """Least squares of ``loss = a + b ln(samples)``: (mean ln s, mean loss, b, standard error of b)."""
    pts = [(math.log(s), loss) for s, loss in points if s > 0]
    n = len(pts)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in pts) / n
    mean_y = sum(y for _, y in pts) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in pts) / sxx
    if n > 2:
        residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in pts)
        stderr = math.sqrt(residual / (n - 2) / sxx)
    else:
        stderr = abs(slope) / 2  # two points say nothing about the noise: a wide, stated interval
    return mean_x, mean_y, slope, stderr


def estimate_time_to_loss(
    windows: Sequence[Window],
    target: float,
    throughput_samples_s: float | None,
    warmup_steps: int | None = None,
) -> TimeToLoss | None:
    """The time to ``target`` of a trial from its windows and throughput; None when either is missing."""
    if not windows or not throughput_samples_s or throughput_samples_s <= 0:
        return None
    points = loss_curve(windows, warmup_steps)
    if not points:
        return None
    samples, low, high, status = samples_to_loss(points, target)
    scale = 1.0
    if status == "unreachable" and target > 0:
        scale = max(1.0, points[-1][1] / target)
    rate = throughput_samples_s
    return TimeToLoss(samples * scale / rate, samples, status, low * scale / rate, high * scale / rate)


def result_time_to_loss(result: TrialResult, target: float, warmup_steps: int | None = None) -> TimeToLoss | None:
    """:func:`estimate_time_to_loss` of a finished trial's result."""
    return estimate_time_to_loss(result.windows, target, result.throughput_samples_s, warmup_steps)


def time_to_loss_attrs(result: TrialResult, spec: Any) -> dict[str, Any]:
    """The time-to-loss user attributes of a trial of a study (a StudySpec) scored on time_to_loss: the
    estimate and its details, or ``time_to_loss_s: None`` when nothing was measured. Empty otherwise."""
    objective = next((o for o in spec.objectives if o.metric == "time_to_loss"), None)
    if objective is None:
        return {}
    estimate = result_time_to_loss(result, float(objective.target))  # as metric_value computes it
    if estimate is None:
        return {"time_to_loss_s": None, "time_to_loss_status": None}
    return estimate.attrs()


def window_extras(windows: Sequence[Window], spec: Any) -> list[list[float | None]]:
    """What a stored window holds beyond ``[step, throughput, memory, loss]``: in a time_to_loss study the
    running estimate after that window (what the trial reported then), so that autotune's multi-objective
    rule can compare finished trials on it at a step. ``[]`` per window otherwise."""
    objective = next((o for o in spec.objectives if o.metric == "time_to_loss"), None)
    if objective is None:
        return [[] for _ in windows]
    running = RunningTimeToLoss(float(objective.target))
    out: list[list[float | None]] = []
    for w in windows:
        value = running(w)
        out.append([value if math.isfinite(value) else None])
    return out


class RunningTimeToLoss:
    """The intermediate time-to-loss value of a running trial: the estimate from its windows so far.

    Called once per window (the monitor's window callback); before a window has a loss it returns the
    unreachable value of the data so far. A trial whose estimate is clearly worse than the best finished
    trial's at the same step is pruned by the single-objective pruners like any other metric.
    """

    def __init__(self, target: float, warmup_steps: int | None = None) -> None:
        self.target = target
        self.warmup_steps = warmup_steps
        self.windows: list[Window] = []

    def __call__(self, window: Window) -> float:
        self.windows.append(window)
        estimate = estimate_time_to_loss(self.windows, self.target, window.throughput_samples_s, self.warmup_steps)
        return estimate.seconds if estimate is not None else math.inf


class TimeToLossRow(NamedTuple):
    """One feasible trial (complete or pruned) of a time_to_loss study, as :func:`explain_choice` reads it."""

    trial: int
    config_key: str
    outcome: str
    global_batch: int
    throughput_samples_s: float
    seconds: float
    status: str
    losses: tuple[tuple[int, float], ...]  # (step, window loss)


def explain_choice(rows: Sequence[TimeToLossRow], chosen_key: str) -> str | None:
    """Why the chosen configuration is not the fastest one, when it is not.

    The fastest trial (highest throughput, pruned ones included) is set against the chosen configuration at
    the fastest trial's last step: the samples each had used by then and the loss each had reached, then
    the two times to the target loss. None when the chosen configuration is the fastest, or either is
    not measured.
    """
    chosen = [r for r in rows if r.config_key == chosen_key and r.outcome == "complete"]
    measured = [r for r in rows if r.throughput_samples_s > 0 and r.losses]
    if not chosen or not measured:
        return None
    fastest = max(measured, key=lambda r: r.throughput_samples_s)
    if fastest.config_key == chosen_key:
        return None
    speed = statistics.median(r.throughput_samples_s for r in chosen)
    seconds = statistics.median(r.seconds for r in chosen)
    reference = chosen[0]
    step, fast_loss = fastest.losses[-1]
    chosen_loss = _loss_at(reference.losses, step)
    big, small = fastest.global_batch, reference.global_batch
    stopped = "" if fastest.outcome == "complete" else f", {fastest.outcome} at step {step}"
    text = (
        f"why not the fastest: trial #{fastest.trial} (global batch {big}{stopped}) ran "
        f"{fastest.throughput_samples_s / speed:.2f}x the chosen configuration's samples/s "
        f"({fastest.throughput_samples_s:,.0f} vs {speed:,.0f}, global batch {small})"
    )
    if chosen_loss is not None and big != small:
        verb = "learned less per sample" if big > small else "learned more per sample but not enough"
        text += (
            f", but {verb}: by step {step} it had used {big / small:.2f}x the samples ({big * step:,} vs "
            f"{small * step:,}) to reach a loss of {fast_loss:.3g} against {chosen_loss:.3g}"
        )
    step_ratio = (big / fastest.throughput_samples_s) / (small / speed)
    text += f"; each of its steps took {step_ratio:.2f}x as long"
    if fastest.status == "unreachable":  # its windows said too little to estimate (e.g. pruned at once)
        return text + "."
    return text + (
        f". Time to the target loss: {fastest.seconds:.3g} s ({fastest.status}) against {seconds:.3g} s "
        "for the chosen configuration."
    )


def _loss_at(losses: Sequence[tuple[int, float]], step: int) -> float | None:
    """The loss of the latest window at or before ``step``."""
    before = [(s, loss) for s, loss in losses if s <= step]
    return max(before)[1] if before else None


def loss_noise_floor(losses_by_config: Sequence[Sequence[float]]) -> float | None:
    """The loss spread of repeats of one configuration: the median over configurations measured at least
    twice of (max - min) of their losses. A loss difference below it is noise, not a win. None without a
    configuration measured twice."""
    spreads = sorted(max(v) - min(v) for v in losses_by_config if len(v) >= 2)
    if not spreads:
        return None
    mid = len(spreads) // 2
    return spreads[mid] if len(spreads) % 2 else (spreads[mid - 1] + spreads[mid]) / 2
