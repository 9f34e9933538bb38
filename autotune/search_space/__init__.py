"""The search space: knob definitions, Optuna distributions, conditional knobs and learning-rate scaling."""

from autotune.knobs import KNOBS, KnobDef
from autotune.search_space._config import TrialConfig, scaled_lr
from autotune.search_space._space import SearchSpace

__all__ = ["KNOBS", "KnobDef", "SearchSpace", "TrialConfig", "scaled_lr"]
