"""The study file: pydantic models of study.yaml, reading and validating it, and the JSON schema.

Everything a user writes in a study file is parsed here, once, into typed objects. Every mistake is
reported as one :class:`~autotune.errors.StudyFileError` line naming the file, the field path and the fix.
This room reads the file only; loading the workload it names is :mod:`autotune.workload`'s
(``study_workload``), checking that it fits is :func:`autotune.workload_check.load_spec`'s.
"""

from autotune.spec._env import RESERVED_ENV, EnvSpec, parse_env
from autotune.spec._global_batch import held_global_batches, stored_global_batches
from autotune.spec._hyperparameters import (
    BASE_LR,
    OPTIMIZER_PREFIX,
    FloatRange,
    HyperparameterSpec,
    baseline_values,
    only_value,
    parse_hyperparameter,
    single_value,
    split_hyperparameters,
)
from autotune.spec._knobs import Choices, Fixed, IntRange, KnobSpec, SearchSpaceSpec, parse_knob, unknown_knob_message
from autotune.spec._load import apply_overrides, parse_spec, read_spec
from autotune.spec._sections import (
    METRIC_KEYS,
    BudgetSpec,
    ConfirmSpec,
    ConstraintsSpec,
    LauncherSpec,
    ObjectiveSpec,
    PrunerSpec,
    SamplerSpec,
    TrialLimits,
    WorkloadSpec,
)
from autotune.spec._study import StudySpec
from autotune.spec._text import redact_url
from autotune.spec._validation import format_validation_error
from autotune.spec._yaml import read_yaml

__all__ = [
    "BASE_LR",
    "METRIC_KEYS",
    "OPTIMIZER_PREFIX",
    "RESERVED_ENV",
    "BudgetSpec",
    "Choices",
    "ConfirmSpec",
    "ConstraintsSpec",
    "EnvSpec",
    "Fixed",
    "FloatRange",
    "HyperparameterSpec",
    "IntRange",
    "KnobSpec",
    "LauncherSpec",
    "ObjectiveSpec",
    "PrunerSpec",
    "SamplerSpec",
    "SearchSpaceSpec",
    "StudySpec",
    "TrialLimits",
    "WorkloadSpec",
    "apply_overrides",
    "baseline_values",
    "format_validation_error",
    "held_global_batches",
    "only_value",
    "parse_env",
    "parse_hyperparameter",
    "parse_knob",
    "parse_spec",
    "read_spec",
    "read_yaml",
    "redact_url",
    "single_value",
    "split_hyperparameters",
    "stored_global_batches",
    "unknown_knob_message",
]
