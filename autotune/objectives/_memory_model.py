"""Peak memory per rank predicted before a trial is launched, from the trials measured so far.

Memory grows about linearly with the samples per micro-batch (``batch_size``) within one *setting*: the
same amp, activation checkpointing, sharding and world size (and, on the CPU, where a rank's peak includes
its DataLoader workers, the same ``num_workers``). :class:`MemoryModel` predicts in tiers, the first that
applies:

1. ``setting fit``: the setting has >= 2 batch sizes measured: its own line through them.
2. ``shared slope``: the setting has a measurement at one batch size: that peak, moved along the slope
   pooled from the settings that have their own line (no such setting yet: the peak itself, with an error
   reaching to "all of the peak but the parameters and optimizer state grows with the batch").
3. ``across settings``: the setting was never measured: a ridge regression over all measurements with the
   settings' knobs as features, its error their leave-one-out spread.
4. ``analytic``: nothing measured: parameters + gradients + Adam's two moments, bytes by dtype, from the
   parameter count (:class:`ModelSize`); a lower bound, activations unknown.

A trial that ran out of memory or over the budget (:attr:`MemoryPoint.at_least`) says only "at least
this": it is no point of a fit, but a configuration of its setting with a batch at least as large is
predicted at least as large. Each prediction carries its own error (:attr:`MemoryPrediction.error_mb`), so
a caller skips a configuration only when it is over a budget by more than that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.objectives._memory_mesh import MeshFit, group_of, mesh_floors, mesh_lower_bound, mesh_shares, on_mesh
from autotune.objectives._memory_points import MemoryPoint, memory_points

__all__ = [
    "MemoryModel", "MemoryPoint", "MemoryPrediction", "ModelSize", "analytic_memory_mb", "memory_points", "setting_of",
]

MB = 1024 * 1024
NOISE_FLOOR = 0.02  # the least relative error of any prediction from measurements (allocator, sampling)
SLOPE_SPREAD = 0.5  # a slope borrowed from other settings is trusted to +-50% (amp, checkpointing change it)
UNSEEN_FLOOR = 0.05  # the least relative error of a prediction for a setting never measured
FEW_POINTS_ERROR = 0.5  # a setting never measured, with fewer than 3 measurements to learn settings from
RIDGE = 1e-3  # the ridge penalty of the across-settings regression (on standardised features)


@dataclass(frozen=True)
class ModelSize:
    """What the analytic first guess knows of the built model: its trainable parameters and their bytes.

    ``param_bytes`` is the bytes of a parameter (4 for fp32; autocast keeps fp32 weights), ``grad_bytes``
    those of its gradient, ``optimizer_bytes`` those of its optimizer state (Adam: two fp32 moments, 8).
    """

    params: int
    param_bytes: int = 4
    grad_bytes: int = 4
    optimizer_bytes: int = 8


@dataclass(frozen=True)
class MemoryPrediction:
    """A predicted peak per rank (MB), its error (MB, about the largest miss expected), how it was made
    (``basis``: setting fit, shared slope, across settings, analytic, out of memory) and from how many
    trials. ``certain``: a trial of the same setting with no larger batch already ran out of memory."""

    mb: float
    error_mb: float
    basis: str
    n_trials: int
    certain: bool = False

    def over(self, budget_mb: float) -> bool:
        """True when the prediction is over ``budget_mb`` by more than its own error."""
        if self.certain:
            return self.mb >= budget_mb
        return self.mb - self.error_mb > budget_mb

    def describe(self, budget_mb: float) -> str:
        """``predicted 9.1 GB > 8 GB budget, from 4 trials``."""
        sign = ">" if self.mb > budget_mb else "<="
        trials = "no trial (parameters and optimizer state)" if self.n_trials == 0 else (
            f"{self.n_trials} trial{'s' if self.n_trials != 1 else ''}"
        )
        return f"predicted {_size(self.mb)} {sign} {_size(budget_mb)} budget, from {trials} ({self.basis})"


def _size(mb: float) -> str:
    if mb >= 1000:
        return f"{mb / 1000:.3g} GB"
    return f"{mb:.0f} MB"


def setting_of(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """The knobs within which memory is linear in ``batch_size``: amp, activation checkpointing, sharding,
    world size, on the CPU ``num_workers`` (a CPU rank's peak includes its DataLoader workers), and the mesh
    (the tensor and pipeline degrees, the pipeline's schedule and micro-batches)."""
    workers = int(config.get("num_workers") or 0) if config.get("device", "cpu") == "cpu" else 0
    return (
        str(config.get("amp", "off")),
        bool(config.get("activation_checkpointing", False)),
        str(config.get("sharding", "ddp")),
        int(config.get("world_size", 1)),
        workers,
        int(config.get("tensor_parallel") or 1),
        int(config.get("pipeline_parallel") or 1),
        config.get("pipeline_schedule"),
        config.get("pipeline_microbatches"),
    )


def analytic_memory_mb(size: ModelSize, config: Mapping[str, Any]) -> float:
    """Parameters + gradients + optimizer state per rank (MB): a rank holds its tensor-parallel shard of its
    pipeline stage, and under FSDP its data-parallel shard of that (``_memory_mesh.mesh_shares``)."""
    per_param = size.param_bytes + size.grad_bytes + size.optimizer_bytes
    return size.params * per_param * mesh_shares(config)[0] / MB


def _state_mb(size: ModelSize | None) -> float | None:
    return None if size is None else size.params * (size.param_bytes + size.grad_bytes + size.optimizer_bytes) / MB


def _per_sample(config: Mapping[str, Any]) -> float:
    """A rank's activation samples per sample of ``batch_size`` (1 without a tensor or pipeline mesh)."""
    return mesh_shares({**config, "batch_size": 1})[1]


def _features(config: Mapping[str, Any]) -> list[float]:
    """The across-settings regression's features (after the intercept): batch, and the settings' knobs with
    their effect on the per-sample slope."""
    amp, ckpt, sharding, world, workers = setting_of(config)[:5]
    batch = float(config.get("batch_size", 1))
    half, ck, shard = float(amp != "off"), float(ckpt), float(sharding != "ddp")
    return [batch, float(workers), float(world - 1), half, ck, shard, batch * half, batch * ck, shard / world]


class MemoryModel:
    """Predicts a configuration's peak memory per rank from ``points`` (see the module's docstring).

    ``size`` enables the analytic first guess when nothing was measured.
    """

    def __init__(self, points: Iterable[MemoryPoint], size: ModelSize | None = None) -> None:
        all_points = [p for p in points if math.isfinite(p.peak_mb) and p.peak_mb > 0]
        self.measured = [p for p in all_points if not p.at_least]
        self.bounds = [p for p in all_points if p.at_least]
        self.size = size
        self.n_trials = len(all_points)
        by_setting: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
        for p in self.measured:
            by_setting.setdefault(setting_of(p.config), []).append((float(p.config.get("batch_size", 1)), p.peak_mb))
        self._settings = by_setting
        self._lines = {s: line for s, xy in by_setting.items() if (line := _line(xy)) is not None}
        scale = {setting_of(p.config): _per_sample(p.config) for p in self.measured}
        # the pooled slope per activation sample: a mesh's rank holds a share of each sample's activations
        self._slope = _pooled_slope([[(x * scale[s], y) for x, y in by_setting[s]] for s in self._lines])
        self._noise = _pooled_noise([(by_setting[s], self._lines[s]) for s in self._lines])
        self._ridge = _Ridge.fit(self.measured) if len(by_setting) >= 3 and len(self.measured) >= 5 else None

    def predict(self, config: Mapping[str, Any]) -> MemoryPrediction | None:
        """The predicted peak per rank of ``config``, or None when nothing is known (no measurement, no size)."""
        prediction = self._from_measurements(config)
        if prediction is None and self.size is not None:
            static = analytic_memory_mb(self.size, config)
            # a lower bound: the error reaches down to the parameters and optimizer state alone
            prediction = MemoryPrediction(static * 1.25, static * 0.25, "analytic", self.n_trials)
        return self._bounded(config, prediction)

    def _from_measurements(self, config: Mapping[str, Any]) -> MemoryPrediction | None:
        setting = setting_of(config)
        batch = float(config.get("batch_size", 1))
        n = self.n_trials
        if setting in self._lines:
            a, b = self._lines[setting]
            mb = a + b * batch
            xy = self._settings[setting]
            rmse = _rmse(xy, (a, b)) if len(xy) >= 3 else self._noise * mb
            span = max(x for x, _ in xy) - min(x for x, _ in xy)
            outside = max(0.0, batch - max(x for x, _ in xy), min(x for x, _ in xy) - batch)
            extrapolation = b * outside * (NOISE_FLOOR * 5 if span > 0 else 1.0)  # the line's slope is a guess
            return MemoryPrediction(mb, max(NOISE_FLOOR * mb, 2 * rmse) + extrapolation, "setting fit", n)
        if setting in self._settings:
            xy = self._settings[setting]
            x0 = sum(x for x, _ in xy) / len(xy)
            y0 = sum(y for _, y in xy) / len(xy)
            if self._slope is not None:
                slope = self._slope * _per_sample(config)
                mb = y0 + slope * (batch - x0)
                err = SLOPE_SPREAD * slope * abs(batch - x0) + max(NOISE_FLOOR, 2 * self._noise) * mb
                return MemoryPrediction(mb, err, "shared slope", n)
            static = analytic_memory_mb(self.size, config) if self.size is not None else 0.0
            top = max(0.0, y0 - min(static, y0)) / x0  # all of the non-static memory grows with the batch
            # no slope seen yet: the measured peak, with an error reaching to "all of it grows with the batch"
            return MemoryPrediction(y0, top * abs(batch - x0) + NOISE_FLOOR * y0, "shared slope", n)
        mesh = self._mesh_fit(config)
        if mesh is not None:
            return mesh
        if self._ridge is not None:
            mb = self._ridge.predict(config)
            if mb > 0:
                err = max(UNSEEN_FLOOR * mb, self._ridge.loo_error * mb)
                return MemoryPrediction(mb, err, "across settings", n)
        if self.measured:
            ys = [p.peak_mb for p in self.measured]
            mb = sum(ys) / len(ys)
            return MemoryPrediction(mb, FEW_POINTS_ERROR * mb + (max(ys) - min(ys)), "across settings", n)
        return None

    def _mesh_fit(self, config: Mapping[str, Any]) -> MemoryPrediction | None:
        """A mesh never measured, where the study measured tensor- or pipeline-parallel meshes or is asked for one:
        the mesh fit over the measurements of its group (``_memory_mesh``)."""
        group = [(p.config, p.peak_mb) for p in self.measured if group_of(p.config) == group_of(config)]
        if not (on_mesh(config) or any(on_mesh(c) for c, _ in group)):
            return None
        state = _state_mb(self.size)
        fit = MeshFit.fit(group, state)
        # a lower bound has no error below it: the activations it leaves out (>= 0) are its margin
        bound = mesh_lower_bound(config, group, state)
        if fit is None:
            return None if bound is None else MemoryPrediction(bound, 0.0, "mesh lower bound", self.n_trials)
        mb = fit.predict(config)
        if bound is not None and bound > mb - fit.error * mb:  # the fit's error reaches below what is known
            mb = max(mb, bound)
            return MemoryPrediction(mb, mb - bound, "mesh fit, bounded below", self.n_trials)
        return MemoryPrediction(mb, fit.error * mb, "mesh fit", self.n_trials) if mb > 0 else None

    def _bounded(self, config: Mapping[str, Any], prediction: MemoryPrediction | None) -> MemoryPrediction | None:
        """At least the peak of an out-of-memory trial of the same setting with no larger batch, or of a mesh
        whose rank held no more training state and activations (certain); between a measured batch and a larger
        one that ran out, at least the line through the two."""
        setting, batch = setting_of(config), float(config.get("batch_size", 1))
        bounds = [
            (float(p.config.get("batch_size", 1)), p.peak_mb) for p in self.bounds if setting_of(p.config) == setting
        ]
        floors = [y for x, y in bounds if x <= batch]
        others = [(p.config, p.peak_mb) for p in self.bounds if setting_of(p.config) != setting]
        meshes = mesh_floors(config, others)
        if floors or meshes:
            floor = max(floors + meshes)
            if prediction is not None and prediction.mb - prediction.error_mb >= floor:
                return prediction
            mb = max(floor, prediction.mb if prediction is not None else floor)
            basis = "out of memory at a batch no larger" if floor in floors else \
                "out of memory on a mesh whose ranks held no more"
            return MemoryPrediction(mb, 0.0, basis, self.n_trials, certain=True)
        below = [(x, y) for x, y in self._settings.get(setting, []) if x < batch]
        lines = [y0 + (yb - y0) * (batch - x0) / (xb - x0) for x0, y0 in below for xb, yb in bounds if xb > batch]
        if lines and (prediction is None or max(lines) > prediction.mb):
            mb = max(lines)  # a lower bound while memory is linear in the batch
            return MemoryPrediction(mb, NOISE_FLOOR * mb, "between a measured batch and an oom", self.n_trials)
        return prediction


def _line(xy: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares ``y = a + b x`` (b >= 0: memory does not shrink with the batch); None with one x."""
    xs = [x for x, _ in xy]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(y for _, y in xy) / len(xy)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = max(0.0, sum((x - mx) * (y - my) for x, y in xy) / sxx)
    return my - b * mx, b


def _rmse(xy: Sequence[tuple[float, float]], line: tuple[float, float]) -> float:
    a, b = line
    dof = max(1, len(xy) - 2)
    return math.sqrt(sum((y - a - b * x) ** 2 for x, y in xy) / dof)


def _pooled_slope(groups: Sequence[Sequence[tuple[float, float]]]) -> float | None:
    """One slope for all settings with >= 2 batch sizes: within-setting deviations pooled (>= 0)."""
    sxy = sxx = 0.0
    for xy in groups:
        mx, my = sum(x for x, _ in xy) / len(xy), sum(y for _, y in xy) / len(xy)
        sxy += sum((x - mx) * (y - my) for x, y in xy)
        sxx += sum((x - mx) ** 2 for x, _ in xy)
    return max(0.0, sxy / sxx) if sxx > 0 else None


def _pooled_noise(fits: Sequence[tuple[Sequence[tuple[float, float]], tuple[float, float]]]) -> float:
    """The relative residual spread of the settings' own lines (those with >= 3 points), else the floor."""
    rel = [
        (y - a - b * x) / y for xy, (a, b) in fits if len(xy) >= 3 for x, y in xy
    ]
    if len(rel) < 3:
        return NOISE_FLOOR
    return max(NOISE_FLOOR, math.sqrt(sum(r * r for r in rel) / max(1, len(rel) - 2)))


@dataclass(frozen=True)
class _Ridge:
    """Peak memory as a ridge regression over all measurements, for a setting never measured; its relative
    error is the worst leave-one-out miss, where leaving a point out leaves its setting unseen."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    loo_error: float

    @classmethod
    def fit(cls, points: Sequence[MemoryPoint]) -> _Ridge:
        x = np.array([_features(p.config) for p in points], dtype=float)
        y = np.array([p.peak_mb for p in points], dtype=float)
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale == 0] = 1.0
        coef = _solve((x - mean) / scale, y)
        misses = []
        settings = [setting_of(p.config) for p in points]
        for s in set(settings):
            keep = np.array([t != s for t in settings])
            if keep.sum() < 2:
                continue
            m, sc = x[keep].mean(axis=0), x[keep].std(axis=0)
            sc[sc == 0] = 1.0
            c = _solve((x[keep] - m) / sc, y[keep])
            pred = c[0] + ((x[~keep] - m) / sc) @ c[1:]
            misses.extend(np.abs(pred - y[~keep]) / y[~keep])
        loo = float(max(misses)) if misses else FEW_POINTS_ERROR
        return cls(mean, scale, coef, loo if len(misses) >= 3 else max(loo, FEW_POINTS_ERROR))

    def predict(self, config: Mapping[str, Any]) -> float:
        z = (np.array(_features(config), dtype=float) - self.mean) / self.scale
        return float(self.coef[0] + z @ self.coef[1:])


def _solve(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ridge least squares with an unpenalised intercept: ``[intercept, coefficients...]``."""
    n, k = z.shape
    a = np.hstack([np.ones((n, 1)), z])
    penalty = np.sqrt(RIDGE * max(1, n)) * np.eye(k + 1)[1:]
    coef, *_ = np.linalg.lstsq(np.vstack([a, penalty]), np.concatenate([y, np.zeros(k)]), rcond=None)
    return np.asarray(coef)
