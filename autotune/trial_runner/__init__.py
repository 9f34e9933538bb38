"""Trial runner: launchers, the per-rank worker, the monitor, and trial outcomes.

``run_trial(plan, trial_dir, launcher)`` runs one real distributed trial and returns its TrialResult.
"""

from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._local import LocalLauncher, ProcessTreeHandle, trial_environment
from autotune.trial_runner._monitor import Monitor, MetricsTail, run_trial
from autotune.trial_runner._plan import TrialPlan
from autotune.trial_runner._result import Outcome, TrialResult, Window

__all__ = [
    "Launcher",
    "LocalLauncher",
    "MetricsTail",
    "Monitor",
    "Outcome",
    "ProcessTreeHandle",
    "RunHandle",
    "TrialPlan",
    "TrialResult",
    "Window",
    "run_trial",
    "trial_environment",
]
