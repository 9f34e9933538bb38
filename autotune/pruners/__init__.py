"""Pruners: the Optuna pruners autotune builds from a study file, and its multi-objective rule.

:class:`NoiseAwarePruner` (``pruner: best``, the default, and ``median``/``percentile``) prunes only what is worse
than the noise the study measured (:func:`autotune.objectives.measured_margin`); :class:`FeasibleReferences` shows
a wrapped Optuna pruner only the trials that may be compared with; :class:`DominancePruner` is the rule for
multi-objective studies. :func:`make_pruner` builds what ``pruner:`` names.
"""

from autotune.pruners._dominance import DominancePruner, History, PruningDecision
from autotune.pruners._factory import make_pruner
from autotune.pruners._noise_aware import NoiseAwarePruner
from autotune.pruners._references import FeasibleReferences

__all__ = ["DominancePruner", "FeasibleReferences", "History", "NoiseAwarePruner", "PruningDecision", "make_pruner"]
