"""Scale: the throughput of a workload over nodes, ranks and per-rank batch (:class:`ScaleModel`, fitted from
measured step times), the gradient noise scale from two batch sizes' squared gradient norms
(:func:`estimate_noise_scale`), the statistical efficiency of a global batch from it, the noise scale a run
will reach projected from its early readings (:func:`project_noise_scale`), and the best per-rank batches at
a scale never measured (:func:`plan_scale`), and a cluster's network profile: how the sync across nodes
grows past two nodes, learned from other workloads (:class:`SyncGrowth`, :func:`fit_sync_growth`). Pure
numbers (numpy and scipy): no torch, no Optuna, no other room of autotune.
"""

from autotune.scale._growth import SyncGrowth
from autotune.scale._model import Interval, ScaleError, ScaleModel, ScaleParams, StepReading, check_enough
from autotune.scale._noise import INTERVAL as NOISE_INTERVAL
from autotune.scale._noise import NoiseEstimate, NoiseWindow, estimate_noise_scale, signal_and_noise
from autotune.scale._plan import BatchPlan, Reach, efficiency, noise_scale, plan_scale, reach
from autotune.scale._profile import fit_sync_growth
from autotune.scale._trend import project_noise_scale

__all__ = [
    "NOISE_INTERVAL",
    "BatchPlan",
    "Interval",
    "NoiseEstimate",
    "NoiseWindow",
    "Reach",
    "ScaleError",
    "ScaleModel",
    "ScaleParams",
    "StepReading",
    "SyncGrowth",
    "check_enough",
    "efficiency",
    "estimate_noise_scale",
    "fit_sync_growth",
    "noise_scale",
    "plan_scale",
    "project_noise_scale",
    "reach",
    "signal_and_noise",
]
