"""Scale: the throughput of a workload over nodes, ranks and per-rank batch (:class:`ScaleModel`, fitted from
measured step times), the statistical efficiency of a global batch from the gradient noise scale, and the
best per-rank batches at a scale never measured (:func:`plan_scale`). Pure numbers (numpy and scipy): no
torch, no Optuna, no other room of autotune.
"""

from autotune.scale._model import Interval, ScaleError, ScaleModel, ScaleParams, StepReading, check_enough
from autotune.scale._plan import BatchPlan, Reach, efficiency, noise_scale, plan_scale, reach

__all__ = [
    "BatchPlan",
    "Interval",
    "Reach",
    "ScaleError",
    "ScaleModel",
    "ScaleParams",
    "StepReading",
    "check_enough",
    "efficiency",
    "noise_scale",
    "plan_scale",
    "reach",
]
