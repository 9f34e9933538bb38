"""autotune: calibrate distributed PyTorch training before it runs."""

from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError, LaunchError, StudyFileError, UsageError, WorkloadError
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.version import __version__ as __version__
from autotune.workload import Workload
from autotune.workload_check import load_spec

if TYPE_CHECKING:
    from autotune.calibration import Calibration, calibrate, load_calibration


__all__ = [
    "AutotuneError",
    "Calibration",
    "LaunchError",
    "StudyFileError",
    "StudySpec",
    "TrialConfig",
    "UsageError",
    "Workload",
    "WorkloadError",
    "calibrate",
    "load_calibration",
    "load_spec",
]

_LAZY = {"Calibration", "calibrate", "load_calibration"}


def __getattr__(name: str) -> Any:
    # calibrate() pulls in Optuna and the tuner; a trial's ranks import autotune too and need neither.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module("autotune.calibration"), name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
