"""The gradient noise scale a whole run will see, projected from its early readings.

The noise scale grows as training proceeds (McCandlish et al. 2018: it grows as the loss falls; on the Pollux
traces 10 to 100 times over a run), so one read early in a run undervalues the large batches that pay off
later. :func:`project_noise_scale` fits a power law ``B_noise = a * progress ** c`` (least squares in log-log,
``c`` held at 0 or above) to the readings a run has made so far and returns its value at the run's
``horizon``: the training length in the same unit as ``progress`` (samples, or steps of the base batch),
which a user states before training (its epochs). The first reading is left out when three or more remain:
a run's first window reads the noise before the optimizer has settled (on the traces, 0 to 1% of later
values). A reading at one progress only (or readings over less than a 1.5x span of it) shows no trend: the
last value is returned as it is, never projected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_SPAN", "project_noise_scale"]

MIN_SPAN = 1.5  # readings over a narrower span of progress (largest / smallest) show no trend to project


def project_noise_scale(progress: Sequence[float], noise: Sequence[float], horizon: float) -> float:
    """The noise scale at ``horizon`` from readings ``noise[i]`` taken at ``progress[i]`` (see the module
    docstring); raises ValueError when no reading is positive and finite or the horizon is not positive."""
    if not horizon > 0 or not math.isfinite(horizon):
        raise ValueError(f"horizon must be a positive progress (got {horizon}): the run's planned length")
    points = sorted(
        (float(p), float(b))
        for p, b in zip(progress, noise, strict=True)
        if p > 0 and b > 0 and math.isfinite(p) and math.isfinite(b)
    )
    if not points:
        raise ValueError("no noise-scale reading is positive and finite: nothing to project")
    if len(points) >= 3:
        points = points[1:]
    x = np.log([p for p, _ in points])
    y = np.log([b for _, b in points])
    if x.max() - x.min() < math.log(MIN_SPAN):
        return points[-1][1]
    slope, intercept = np.polyfit(x, y, 1)
    slope = max(float(slope), 0.0)
    if slope == 0.0:
        return float(np.exp(y.mean()))
    return float(np.exp(intercept + slope * math.log(horizon)))
