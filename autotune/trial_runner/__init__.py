"""Trial runner: launchers, the per-rank worker, the monitor, and trial outcomes; ``run_trial(plan, trial_dir,
launcher)`` runs one real distributed trial and returns its TrialResult."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from autotune.trial_result import Outcome, TrialResult, Window
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._factory import make_launcher
from autotune.trial_runner._judge import WindowCallback, WindowJudge
from autotune.trial_runner._local import LocalLauncher, ProcessTreeHandle, trial_environment
from autotune.trial_runner._parity import compare_losses, parity_plans
from autotune.trial_runner._plan import TrialPlan, plan_for
from autotune.trial_runner._prepare import prepared_launcher
from autotune.trial_runner._process import free_port, start_ticks
from autotune.trial_runner._trace import TRACE_ENV, trace_event, traced
from autotune.trial_runner._warm import WarmLauncher

if TYPE_CHECKING:  # imported on first use (__getattr__): they import torch, which launching a trial does not need
    from autotune.trial_runner._apply import (
        THREAD_WORDS,
        apply_checkpointing,
        compute_threads,
        resolve_threads,
        shard_model,
    )
    from autotune.trial_runner._monitor import MetricsTail, Monitor, TickCallback, run_trial
    from autotune.trial_runner._noise import noise_source
    from autotune.trial_runner._pace import PacedRun, PacedRunFailed

__all__ = [
    "THREAD_WORDS",
    "TRACE_ENV",
    "Launcher",
    "LocalLauncher",
    "MetricsTail",
    "Monitor",
    "Outcome",
    "PacedRun",
    "PacedRunFailed",
    "ProcessTreeHandle",
    "RunHandle",
    "TickCallback",
    "TrialPlan",
    "TrialResult",
    "WarmLauncher",
    "Window",
    "WindowCallback",
    "WindowJudge",
    "apply_checkpointing",
    "compare_losses",
    "compute_threads",
    "free_port",
    "make_launcher",
    "noise_source",
    "parity_plans",
    "plan_for",
    "prepared_launcher",
    "resolve_threads",
    "run_trial",
    "shard_model",
    "start_ticks",
    "trace_event",
    "traced",
    "trial_environment",
]

_LAZY = {
    "_apply": ("THREAD_WORDS", "apply_checkpointing", "compute_threads", "resolve_threads", "shard_model"),
    "_monitor": ("MetricsTail", "Monitor", "TickCallback", "run_trial"),
    "_noise": ("noise_source",),
    "_pace": ("PacedRun", "PacedRunFailed"),
}


def __getattr__(name: str) -> Any:
    for module, names in _LAZY.items():
        if name in names:
            return getattr(import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
