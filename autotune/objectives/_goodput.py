"""Goodput: samples/s worth as much as samples at the workload's base batch (Pollux, OSDI 2021).

    goodput_samples_s = throughput_samples_s x (B_noise + B0) / (B_noise + B)

``B`` is the trial's global batch, ``B0`` the workload's ``base_batch_size`` (the global batch its base_lr
belongs to) and ``B_noise`` the gradient noise scale (autotune.scale: the efficiency function, the same one
``autotune plan`` ranks by). The noise scale is the trial's own (``gradient_noise_scale``, measured in it);
a trial without one takes the study's (the median of the complete trials' own); a trial at the base batch
needs none (its efficiency is 1 whatever the noise scale). A trial with none of these is not scored: it is
told failed, its reason says why, and it is no verdict on its configuration's speed.

While a trial runs, :class:`RunningGoodput` reports the throughput so far times the efficiency from the
noise scale of its windows so far (else the study's; else 1, so that no trial is pruned on a noise scale
not yet known).

The noise scale is that of the training the trial ran, its start; it grows as training goes on (on the lm
workload and every Pollux trace), so goodput from a short trial undervalues the large batches a long run could
use. No projection from a short trial held across both (benchmarks/README.md section 16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autotune.scale import NoiseWindow, efficiency, estimate_noise_scale
from autotune.trial_result import TrialResult, Window

GOODPUT = "goodput_samples_s"
NOT_SCORED = "goodput not scored: no gradient noise scale measured in this trial or in the study's complete trials"
Source = Literal["trial", "study", "base batch"]


@dataclass(frozen=True)
class Goodput:
    """A trial's goodput, its statistical efficiency and the noise scale behind it (``source``: the trial's
    own, the study's, or none needed at the base batch)."""

    value: float
    efficiency: float
    noise_scale: float | None
    source: Source

    def attrs(self) -> dict[str, Any]:
        """The trial user attributes (docs/storage.md)."""
        return {GOODPUT: self.value, "statistical_efficiency": round(self.efficiency, 6),
                "goodput_noise_scale": self.noise_scale, "goodput_noise_from": self.source}


def own_noise_scale(result: TrialResult) -> float | None:
    """The noise scale the trial measured (None: not measured, or not resolved)."""
    noise = result.gradient_noise_scale
    value = noise.value if noise is not None else None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def result_goodput(result: TrialResult, study_noise: float | None = None) -> Goodput | None:
    """The trial's goodput (see the module docstring), or None when it cannot be scored."""
    speed, batch, base = result.throughput_samples_s, result.global_batch, result.base_batch_size
    if speed is None or not math.isfinite(speed) or batch is None or base is None:
        return None
    own = own_noise_scale(result)
    if own is None and batch == base:
        return Goodput(float(speed), 1.0, study_noise, "base batch")
    noise = own if own is not None else study_noise
    if noise is None:
        return None
    source: Source = "trial" if own is not None else "study"
    e = efficiency(batch, noise, base)
    return Goodput(float(speed) * e, e, noise, source)


def goodput_attrs(result: TrialResult, spec: Any, study_noise: float | None) -> dict[str, Any]:
    """The goodput user attributes of a trial of a study (a StudySpec) scored on goodput (``goodput_samples_s:
    None`` when it cannot be scored); empty otherwise."""
    if not any(o.metric == "goodput" for o in spec.objectives):
        return {}
    scored = result_goodput(result, study_noise)
    return scored.attrs() if scored is not None else {GOODPUT: None, "goodput_noise_from": None}


def noise_scale_attr(result: TrialResult) -> dict[str, Any] | None:
    """The ``gradient_noise_scale`` user attribute: value, interval and what it came from (None: not measured)."""
    from dataclasses import asdict

    return asdict(result.gradient_noise_scale) if result.gradient_noise_scale is not None else None


class RunningGoodput:
    """The intermediate goodput of a running trial: its throughput so far times the efficiency from its windows'
    noise scale so far (else ``study_noise``; else 1)."""

    def __init__(self, config: Mapping[str, Any] | None, study_noise: float | None) -> None:
        config = config or {}
        self.batch = int(config.get("global_batch", 0)) or None
        self.base = int(config.get("base_batch_size", 0)) or None
        self.study_noise = study_noise
        self.readings: list[NoiseWindow] = []
        self.batches: tuple[int, int] | None = None

    def __call__(self, window: Window) -> float:
        noise = window.gradient_noise
        if noise is not None:
            self.batches = self.batches or (noise.batch_small, noise.batch_big)
            self.readings.append(NoiseWindow(noise.steps, noise.sqr_small, noise.sqr_big))
        return window.throughput_samples_s * self.efficiency()

    def efficiency(self) -> float:
        if self.batch is None or self.base is None or self.batch == self.base:
            return 1.0
        noise = self.study_noise
        if self.batches is not None:
            estimate = estimate_noise_scale(*self.batches, self.readings)
            if estimate is not None and estimate.value is not None:
                noise = estimate.value
        return efficiency(self.batch, noise, self.base) if noise is not None else 1.0
