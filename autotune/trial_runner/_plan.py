"""TrialPlan: everything a trial's ranks need, written as config.json into the trial's folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits

PLAN_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
DONE_FILE = "done.json"
APPLIED_FILE = "applied.json"
HEARTBEAT_FILE = "heartbeat"
GATE_FILE = "gate"  # a paced run: how many blocks the tuner has released (written by the tuner)
PARKED_FILE = "parked"  # a paced run: how many blocks rank 0 has finished, written as it stops at the gate
WAKE_FILE = "parked.fifo"  # a paced run: rank 0 writes a byte into this pipe as it parks (the tuner waits on it)
ERRORS_DIR = "errors"
LAUNCHER_ERR_FILE = "launcher.err"  # the launcher's own stderr (torchrun, the warm leader, srun)
LAUNCHER_EXIT_FILE = "launcher.exit"  # the warm leader's exit status
# What a run leaves in its trial folder. A folder used again (a study file rerun after its database was deleted
# numbers its trials from 0 again) must not hand the new run the old one's windows, rank pids (signalled to freeze
# or end the run), parked count (a paced block that seems to end at once) or tracebacks.
LEFT_BY_A_RUN = (
    METRICS_FILE, DONE_FILE, APPLIED_FILE, GATE_FILE, PARKED_FILE, WAKE_FILE, LAUNCHER_EXIT_FILE, LAUNCHER_ERR_FILE,
    "launcher.out", "result.json", "slurm.step", "rank*.pid", "rank*.host", "rank*.log", "steps.rank*.json",
    f"{ERRORS_DIR}/*",
)


class TrialPlan(BaseModel):
    """One trial: the config, the workload to build, the limits, and who launched it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: TrialConfig
    entrypoint: str
    args: dict[str, Any] = Field(default_factory=dict)
    base_dir: str = Field(description="folder the entrypoint's relative paths are resolved against")
    limits: TrialLimits = Field(default_factory=TrialLimits)
    seed: int = 0
    tuner_pid: int | None = Field(None, description="ranks exit when this process is gone")
    launched_at: float = Field(0.0, description="time.time() at launch, for time to first step")
    startup_timeout_s: float = Field(300.0, description="collective timeout until the first step")
    step_timeout_s: float = Field(30.0, description="collective timeout after the first step")
    trace: bool = Field(False, description="record DDP all-reduce calls in applied.json (tests)")
    step_times: bool = Field(
        False, description="each rank writes its steps' end times and memory readings to steps.rank<N>.json"
    )
    pace_steps: int | None = Field(
        None, ge=1,
        description="a paced run (a confirmation race): after the warm-up, blocks of this many steps, each released "
        "through the trial folder's gate file; it trains until it is ended",
    )
    evaluate: bool = Field(True, description="a complete trial evaluates the workload's eval_dataset (eval_loss)")
    step_anatomy: bool = Field(
        True, description="time each step's parts (internal: benchmarks/step_anatomy.py measures its cost with it off)"
    )
    step_anatomy_alternate: bool = Field(
        False, description="internal, for benchmarks/step_anatomy.py: the anatomy on in every other measured window "
        "only (on in the first), so one trial pairs each window timed with its neighbours untimed",
    )

    def write(self, trial_dir: Path) -> Path:
        trial_dir.mkdir(parents=True, exist_ok=True)
        path = trial_dir / PLAN_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, trial_dir: Path) -> TrialPlan:
        return cls.model_validate(json.loads((trial_dir / PLAN_FILE).read_text()))


def plan_for(
    spec: Any, config: TrialConfig, *, seed: int | None = None, trace: bool = False, evaluate: bool = True
) -> TrialPlan:
    """The plan of one trial of ``spec`` (a StudySpec) with ``config``; ``evaluate``: whether a complete run
    evaluates the workload's eval_dataset."""
    return TrialPlan(
        config=config,
        entrypoint=spec.workload.entrypoint,
        args=dict(spec.workload.args),
        base_dir=str(spec.base_dir),
        limits=spec.trial,
        seed=spec.sampler.seed or 0 if seed is None else seed,
        trace=trace,
        evaluate=evaluate,
    )
