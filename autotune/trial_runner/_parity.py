"""Loss parity: does a configuration train the same model as one rank does (``autotune trial --check-parity``)?

The configuration runs beside a one-rank run of the same seed and global batch, each for ``steps`` steps, every
step its own window (no warm-up, so the first step is compared too). The one-rank run reads each step's samples
as one batch of ``batch_size x data_parallel`` per micro-step, ``grad_accum`` micro-steps a step: the data-parallel
replicas' DistributedSampler shares of a micro-step are, together, the one-rank run's batch of that micro-step
(the same permutation, cut the same way), so the two runs see the same set of samples in every step and a
correct parallel run follows the one-rank run's losses up to floating-point rounding. Both run without compile
and without evaluation. The comparison is the largest relative difference of the per-step losses (the
data-parallel mean on the last pipeline stage, against the one rank's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.knobs import DDP_ONLY, PIPELINE_ONLY
from autotune.search_space import TrialConfig
from autotune.trial_result import Window
from autotune.trial_runner._plan import TrialPlan

PARITY_STEPS = 20
PARITY_TOLERANCES = {"off": 1e-4, "bf16": 1e-2, "fp16": 1e-2}
"""The largest relative loss difference a correct parallel run may show, by ``amp``. fp32: rounding alone (sums
taken in another order; the built-in workload's meshes stay within 2e-7 over 20 steps). Half precision rounds
every matmul to 8 (bf16) or 11 (fp16) bits of mantissa, and a split changes where it rounds: 5e-5 to 8e-5 on the
built-in workload at tp 2 or pp 2 under bf16; the tolerance leaves room for deeper models (docs/parallel.md)."""


@dataclass(frozen=True)
class Parity:
    """The comparison of two runs' per-step losses."""

    max_relative_difference: float
    steps: int
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.steps > 0 and self.max_relative_difference <= self.tolerance

    def line(self) -> str:
        return f"parity: max relative loss difference {self.max_relative_difference:.3g} over {self.steps} steps"


def one_rank_config(config: TrialConfig) -> TrialConfig:
    """The one-rank configuration of ``config``'s seed and global batch, each micro-step's samples the same set."""
    knobs = config.knobs()
    knobs.update(world_size=1, tensor_parallel=1, pipeline_parallel=1, sharding="ddp", compile="off",
                 batch_size=config.batch_size * config.data_parallel)
    for name in (*PIPELINE_ONLY, *DDP_ONLY):
        knobs[name] = None  # TrialConfig.create gives what applies at one rank
    return TrialConfig.create(**knobs, env=config.env, hyperparameters=config.hyperparameters, device=config.device,
                              base_lr=config.base_lr, base_batch_size=config.base_batch_size)


def parity_plans(plan: TrialPlan, steps: int = PARITY_STEPS) -> tuple[TrialPlan, TrialPlan]:
    """The plan of ``plan``'s configuration and of its one-rank run, both ``steps`` steps with a window each."""
    limits = plan.limits.model_copy(update={"warmup": "fixed", "warmup_steps": 0, "warmup_max_steps": None,
                                            "max_steps": steps, "report_every": 1, "samples": None})
    config = plan.config.model_copy(update={"compile": "off"})
    common = {"limits": limits, "evaluate": False}
    return plan.model_copy(update={"config": config, **common}), plan.model_copy(
        update={"config": one_rank_config(plan.config), **common})


def compare_losses(windows: Sequence[Window], reference: Sequence[Window], amp: str) -> Parity:
    """The largest relative difference of the losses of the steps both runs measured."""
    mine = {w.step: w.loss for w in windows}
    theirs = {w.step: w.loss for w in reference}
    steps = sorted(set(mine) & set(theirs))
    gaps = [abs(mine[s] - theirs[s]) / max(abs(theirs[s]), 1e-12) for s in steps]
    worst = max((g if math.isfinite(g) else math.inf for g in gaps), default=math.inf)  # NaN: no parity
    return Parity(worst, len(steps), PARITY_TOLERANCES.get(amp, 1e-4))
