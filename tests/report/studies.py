"""Test studies written with the real Optuna API exactly as docs/storage.md says the tuner writes them.

A study file (with a tiny workload file beside it) and its SQLite storage under a temporary folder; each
trial gets a trial folder with logs, attached as artifacts before the trial is told, as the tuner does.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.objectives import config_key
from autotune.report import artifact_store_for
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.tuner import attach_trial_artifacts
from autotune.workload_check import load_spec

WORKLOAD = '''\
"""A tiny workload: a linear model on random data."""
from autotune import Workload


def build(n: int = 64) -> Workload:
    import torch

    def dataset():
        return torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randn(n, 1))

    def loss(model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y)

    return Workload(model=lambda: torch.nn.Linear(4, 1), dataset=dataset, loss=loss, base_batch_size=64)
'''

STUDY_YAML = """\
name: {name}
workload: {{entrypoint: tiny_workload.py:build}}
search_space:
  batch_size: {{low: 16, high: 256, log: true}}
  num_workers: {{low: 0, high: 2}}
  amp: {{choices: [off, bf16]}}
  world_size: {{choices: [1, 2]}}
objectives:
{objectives}
constraints: {{max_memory_mb: {budget}}}
"""

BUDGET_MB = 1000.0
FAIL_OUTCOMES = {"crashed", "timeout", "hang", "interrupted"}


@dataclass
class Plan:
    """One trial to write: what the tuner would have measured."""

    role: str
    outcome: str
    reason: str
    batch_size: int
    amp: str = "off"
    world_size: int = 1
    num_workers: int = 0
    throughput: float | None = None
    memory: float | None = None
    loss: float | None = None
    confirms: int | None = None
    error_lines: list[str] = field(default_factory=list)

    def config(self) -> TrialConfig:
        return TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=self.batch_size, amp=self.amp,
                                  world_size=self.world_size, num_workers=self.num_workers)  # type: ignore[arg-type]

    def step_anatomy(self) -> dict[str, float | None] | None:
        """Where its step went: without DataLoader workers it waits for data, at two ranks it synchronises."""
        if self.throughput is None:
            return None
        parts = {"data_wait_s": 0.030 if self.num_workers == 0 else 0.002, "forward_backward_s": 0.020,
                 "sync_exposed_s": 0.004 if self.world_size > 1 else 0.0, "optimizer_s": 0.002, "other_s": 0.001}
        return {**parts, "data_wait_share": round(parts["data_wait_s"] / sum(parts.values()), 4)}

    def windows(self) -> list[list[Any]]:
        """Four windows (steps 10..40) ending at the final numbers; a pruned trial stops at step 20."""
        if self.throughput is None:
            return []
        steps = [10, 20] if self.outcome == "pruned" else [10, 20, 30, 40]
        n = len(steps)
        return [[s, self.throughput * (0.7 + 0.3 * (i + 1) / n), self.memory, self.loss] for i, s in enumerate(steps)]


# The single-objective study: throughput, memory budget 1000 MB. Trials 8 and 9 confirm trial 1.
SINGLE_PLANS = [
    Plan("baseline", "complete", "finished 40 steps", 64, throughput=1000.0, memory=400.0, loss=1.0),
    Plan("search", "complete", "finished 40 steps", 128, "bf16", 2, 1, throughput=2600.0, memory=600.0, loss=0.9),
    Plan("search", "pruned", "pruned at step 20", 32, throughput=700.0, memory=300.0, loss=1.2),
    Plan("search", "oom", "peak memory 1500 MB is over the budget 1000 MB", 256, "bf16", 2, 2, throughput=2000.0,
         memory=1500.0, loss=1.1, error_lines=["RuntimeError: over the memory budget"]),
    Plan("search", "crashed", "rank 1 killed by SIGSEGV", 16, "off", 2, 1,
         error_lines=["Fatal Python error: Segmentation fault"]),
    Plan("search", "complete", "finished 40 steps", 200, "bf16", 1, 2, throughput=2400.0, memory=800.0, loss=0.95),
    Plan("search", "timeout", "over max_seconds (60 s) at step 25", 64, "bf16", 1, 0, throughput=1200.0, memory=350.0,
         loss=1.05),
    Plan("search", "diverged", "loss became nan at step 12", 100, "off", 2, 2, throughput=1800.0, memory=500.0),
    Plan("confirm", "complete", "finished 40 steps", 128, "bf16", 2, 1, throughput=2500.0, memory=610.0, loss=0.91,
         confirms=1),
    Plan("confirm", "complete", "finished 40 steps", 128, "bf16", 2, 1, throughput=2700.0, memory=590.0, loss=0.89,
         confirms=1),
]

# The two-objective study (throughput up, memory down): no intermediate values, autotune prunes itself.
MULTI_PLANS = [
    Plan("baseline", "complete", "finished 40 steps", 64, throughput=1000.0, memory=400.0, loss=1.0),
    Plan("search", "complete", "finished 40 steps", 128, "bf16", 2, 1, throughput=2600.0, memory=600.0, loss=0.9),
    Plan("search", "complete", "finished 40 steps", 32, throughput=800.0, memory=250.0, loss=1.1),
    Plan("search", "complete", "finished 40 steps", 100, "off", 1, 0, throughput=900.0, memory=700.0, loss=1.0),
    Plan("search", "pruned", "dominated by 3 finished trials at step 20", 48, throughput=500.0, memory=450.0,
         loss=1.3),
    Plan("search", "oom", "peak memory 1400 MB is over the budget 1000 MB", 256, "bf16", 2, 2, throughput=3000.0,
         memory=1400.0, loss=1.0),
    Plan("search", "hang", "silent for 20 s after step 5", 64, "off", 2, 0),
]


def write_study_file(folder: Path, name: str, objectives: list[tuple[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_workload.py").write_text(WORKLOAD)
    lines = "\n".join(f"  - {{metric: {m}, direction: {d}}}" for m, d in objectives)
    path = folder / f"{name}.yaml"
    path.write_text(STUDY_YAML.format(name=name, objectives=lines, budget=int(BUDGET_MB)))
    return path


def _write_trial_dir(folder: Path, plan: Plan, number: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(plan.config().model_dump_json(indent=2))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": w[0], "throughput_samples_s": w[1]}) + "\n"
                                                  for w in plan.windows()))
    (folder / "rank0.log").write_text(f"trial {number}: rank 0 started\n")
    (folder / "launcher.err").write_text("\n".join(plan.error_lines) + "\n")
    (folder / "result.json").write_text(json.dumps({"outcome": plan.outcome, "reason": plan.reason}))


def build_study(spec: StudySpec, plans: list[Plan], confirm: bool) -> optuna.Study:
    """Write ``plans`` into the spec's storage as the tuner would; with ``confirm`` the confirmation attribute."""
    metrics = [{"throughput": "throughput_samples_s"}.get(o.metric, o.metric) for o in spec.objectives]
    study = optuna.create_study(storage=spec.storage_url(), study_name=spec.name,
                                directions=[o.direction for o in spec.objectives])
    study.set_metric_names(metrics)
    study.set_user_attr("autotune", {"version": "0.1.0", "spec": spec.model_dump(mode="json"), "device": "cpu"})
    store = artifact_store_for(spec)
    budget = spec.constraints.max_memory_mb
    for number, plan in enumerate(plans):
        config = plan.config()
        study.enqueue_trial({"batch_size": plan.batch_size, "num_workers": plan.num_workers, "amp": plan.amp,
                             "world_size": plan.world_size})
        trial = study.ask()
        trial.suggest_int("batch_size", 16, 256, log=True)
        trial.suggest_int("num_workers", 0, 2)
        trial.suggest_categorical("amp", ["off", "bf16"])
        trial.suggest_categorical("world_size", [1, 2])
        trial_dir = spec.runs_dir() / f"trial-{number:04d}"
        attrs: dict[str, Any] = {
            "role": plan.role, "config": config.model_dump(mode="json"),
            "config_key": config_key(config.model_dump(mode="json")), "outcome": plan.outcome,
            "reason": plan.reason, "throughput_samples_s": plan.throughput, "peak_memory_mb": plan.memory,
            "loss": plan.loss, "time_to_first_step_s": 1.5 + number / 10, "wall_s": 9.0 + number,
            "training_s": 6.0, "steps": 40 if plan.outcome == "complete" else 20, "samples": 40 * plan.batch_size,
            "windows": plan.windows(), "trial_dir": str(trial_dir), "error_lines": plan.error_lines,
            "worker": {"host": "testhost", "pid": 4242}, "step_anatomy": plan.step_anatomy(),
        }
        if plan.confirms is not None:
            attrs["confirms"] = plan.confirms
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if len(metrics) == 1:
            for step, *window in plan.windows():
                trial.report(window[0], step)
        _write_trial_dir(trial_dir, plan, number)
        attach_trial_artifacts(study, trial.number, trial_dir, store)
        if plan.outcome in FAIL_OUTCOMES:
            study.tell(trial, state=TrialState.FAIL)
        elif plan.outcome == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
        else:
            memory = plan.memory - budget if plan.memory is not None and budget is not None else -1.0
            trial.set_constraint("memory", memory)
            trial.set_constraint("diverged", 1.0 if plan.outcome == "diverged" else 0.0)
            by_metric = {"throughput_samples_s": plan.throughput, "peak_memory_mb": plan.memory, "loss": plan.loss}
            values = [by_metric[m] if by_metric[m] is not None else float("nan") for m in metrics]
            study.tell(trial, values if len(values) > 1 else values[0])
    if confirm:
        study.set_user_attr("autotune_confirmation", confirmation(plans))
    return study


def group(plans: list[Plan], numbers: list[int]) -> dict[str, Any]:
    values = [plans[n].throughput for n in numbers]
    known = [v for v in values if v is not None]
    median = statistics.median(known)
    config = plans[numbers[0]].config().model_dump(mode="json")
    return {
        "config_key": config_key(config), "config": config, "trials": numbers, "values": known, "median": median,
        "spread": (max(known) - min(known)) / median,
        "peak_memory_mb": statistics.median(plans[n].memory for n in numbers if plans[n].memory is not None),
        "loss": statistics.median(plans[n].loss for n in numbers if plans[n].loss is not None),
    }


def confirmation(plans: list[Plan]) -> dict[str, Any]:
    """The autotune_confirmation attribute of SINGLE_PLANS: trial 1 confirmed by 8 and 9, baseline 0."""
    best = group(plans, [1, 8, 9])
    runner_up = group(plans, [5])
    baseline = group(plans, [0])
    return {
        "best_trial": 1, "best_config_key": best["config_key"], "groups": [runner_up, best], "baseline": baseline,
        "speedup": best["median"] / baseline["median"], "metric": "throughput_samples_s",
    }


def make(root: Path, name: str, objectives: list[tuple[str, str]], plans: list[Plan], confirm: bool
         ) -> tuple[StudySpec, optuna.Study, Path]:
    """Study file under ``root/studies``, storage and trial folders beside it; returns (spec, study, yaml)."""
    path = write_study_file(root / "studies", name, objectives)
    spec = load_spec(path, check_workload=False)
    return spec, build_study(spec, plans, confirm), path
