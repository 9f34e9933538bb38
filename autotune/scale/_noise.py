"""The gradient noise scale measured in a trial, from two batch sizes' squared gradient norms.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", appendix A): with ``|g_b|^2`` the squared
norm of a gradient averaged over ``b`` samples, ``E|g_b|^2 = |G|^2 + tr(Sigma) / b``. Two batch sizes
``b_small < b_big`` give unbiased estimates of both terms:

    |G|^2    ~ (b_big |g_big|^2 - b_small |g_small|^2) / (b_big - b_small)
    tr(Sigma) ~ (|g_small|^2 - |g_big|^2) / (1 / b_small - 1 / b_big)

and the (simple) noise scale ``B_noise = tr(Sigma) / |G|^2``, in samples. A single step's estimates are very
noisy (``|G|^2`` may come out negative), so the two norms are averaged over steps first and the ratio taken
once (not the ratio per step, which is biased and unbounded). A trial reads them per reporting window: each
window holds the means over its steps (and, for ``|g_small|^2``, over the ranks); the trial's estimate pools
the windows, weighted by their steps. Its interval is a delete-one-window jackknife of ``log B_noise``:
``exp(log B +- t * se)``, with Student's t at 95% on (windows - 1) degrees of freedom; unbounded (None) with
fewer than 2 windows or when a window left out leaves no positive estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["INTERVAL", "NoiseEstimate", "NoiseWindow", "estimate_noise_scale", "signal_and_noise"]

INTERVAL = "95% jackknife over windows (delete one window, log scale)"


@dataclass(frozen=True)
class NoiseWindow:
    """One window's readings: its steps, and the means over them of ``|g_small|^2`` and ``|g_big|^2``."""

    steps: int
    sqr_small: float
    sqr_big: float


@dataclass(frozen=True)
class NoiseEstimate:
    """``B_noise`` in samples (None: the norms did not resolve a positive signal and noise), its interval
    (None: unbounded), the pooled ``|G|^2`` and ``tr(Sigma)`` estimates, and what it came from."""

    value: float | None
    low: float | None
    high: float | None
    grad_sqr: float
    trace: float
    batch_small: int
    batch_big: int
    steps: int
    windows: int


def signal_and_noise(batch_small: int, batch_big: int, sqr_small: float, sqr_big: float) -> tuple[float, float]:
    """The unbiased estimates ``(|G|^2, tr(Sigma))`` from the squared norms at two batch sizes."""
    if not 1 <= batch_small < batch_big:
        raise ValueError(f"two batch sizes, the small one below the big one (got {batch_small} and {batch_big})")
    grad_sqr = (batch_big * sqr_big - batch_small * sqr_small) / (batch_big - batch_small)
    trace = (sqr_small - sqr_big) / (1.0 / batch_small - 1.0 / batch_big)
    return grad_sqr, trace


def _pooled(batch_small: int, batch_big: int, windows: Sequence[NoiseWindow]) -> tuple[float, float]:
    steps = sum(w.steps for w in windows)
    small = sum(w.sqr_small * w.steps for w in windows) / steps
    big = sum(w.sqr_big * w.steps for w in windows) / steps
    return signal_and_noise(batch_small, batch_big, small, big)


def _ratio(grad_sqr: float, trace: float) -> float | None:
    if grad_sqr > 0 and trace > 0 and math.isfinite(grad_sqr) and math.isfinite(trace):
        return trace / grad_sqr
    return None


def estimate_noise_scale(batch_small: int, batch_big: int, windows: Sequence[NoiseWindow]) -> NoiseEstimate | None:
    """The noise scale of a trial's windows (see the module docstring); None when no window has a step."""
    windows = [w for w in windows if w.steps > 0 and math.isfinite(w.sqr_small) and math.isfinite(w.sqr_big)]
    if not windows:
        return None
    grad_sqr, trace = _pooled(batch_small, batch_big, windows)
    value = _ratio(grad_sqr, trace)
    low = high = None
    n = len(windows)
    if value is not None and n >= 2:
        left_out = [_ratio(*_pooled(batch_small, batch_big, windows[:i] + windows[i + 1:])) for i in range(n)]
        if all(v is not None for v in left_out):
            logs = [math.log(v) for v in left_out if v is not None]
            mean = sum(logs) / n
            se = math.sqrt((n - 1) / n * sum((x - mean) ** 2 for x in logs))
            from scipy.stats import t as student_t  # here, not at import: scipy.stats costs a rank 0.4 s to start

            half = float(student_t.ppf(0.975, n - 1)) * se
            low, high = value * math.exp(-half), value * math.exp(half)
    steps = sum(w.steps for w in windows)
    return NoiseEstimate(value, low, high, grad_sqr, trace, batch_small, batch_big, steps, n)
