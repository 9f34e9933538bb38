"""The search space: knob definitions, Optuna distributions, conditional knobs and learning-rate scaling."""

from autotune.knobs import KNOBS, KnobDef
from autotune.search_space._config import TrialConfig, scaled_lr
from autotune.search_space._hyper import PARAM_PREFIX, HyperparameterSpace, param_name
from autotune.search_space._mesh import (
    LAYOUT_KNOBS,
    MESH_PARAM,
    Layout,
    NoFeasibleMesh,
    describe_layouts,
    mesh_label,
    mesh_problem,
)
from autotune.search_space._space import ENV_PARAM_PREFIX, SearchSpace
from autotune.search_space._split import SPLIT_KNOBS, SPLIT_PARAM, BatchSplit, describe_splits
from autotune.search_space._study import hyperparameter_space, study_space

__all__ = [
    "ENV_PARAM_PREFIX",
    "KNOBS",
    "LAYOUT_KNOBS",
    "MESH_PARAM",
    "PARAM_PREFIX",
    "SPLIT_KNOBS",
    "SPLIT_PARAM",
    "BatchSplit",
    "HyperparameterSpace",
    "KnobDef",
    "Layout",
    "NoFeasibleMesh",
    "SearchSpace",
    "TrialConfig",
    "describe_layouts",
    "describe_splits",
    "hyperparameter_space",
    "mesh_label",
    "mesh_problem",
    "param_name",
    "scaled_lr",
    "study_space",
]
