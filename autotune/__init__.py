"""autotune: calibrate distributed PyTorch training before it runs."""

from autotune.errors import AutotuneError, LaunchError, StudyFileError, UsageError, WorkloadError
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec, load_spec
from autotune.workload import Workload

__all__ = [
    "AutotuneError",
    "LaunchError",
    "StudyFileError",
    "StudySpec",
    "TrialConfig",
    "UsageError",
    "Workload",
    "WorkloadError",
    "load_spec",
]
__version__ = "0.1.0"
