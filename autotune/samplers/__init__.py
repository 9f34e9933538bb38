"""Samplers: the Optuna samplers autotune builds from a study file, and its own.

:class:`PartialGPSampler` is the default: Optuna's GP sampler fitted on every measured trial (pruned and failed
ones too, as autotune measured them), with a noise floor from the study's repeated readings
(:func:`noise_floor`) and an exhaustive acquisition search over small discrete spaces. :func:`make_sampler`
builds what ``sampler:`` names, wrapped in :class:`Unrepeated` (no configuration the study measured is
proposed again while one is left); :class:`GridSampler` and :func:`grid_points` are grid search over a study's space.
"""

from autotune.samplers._factory import make_sampler
from autotune.samplers._gp import GP_MAX_TRIALS, OneThreadGPSampler, PartialGPSampler, preload_gp
from autotune.samplers._gp_view import CONSTRAINTS_PREFIX, noise_floor
from autotune.samplers._grid import GridSampler, float_grid, grid_points
from autotune.samplers._unrepeated import Unrepeated, space_points

__all__ = [
    "CONSTRAINTS_PREFIX",
    "GP_MAX_TRIALS",
    "GridSampler",
    "OneThreadGPSampler",
    "PartialGPSampler",
    "Unrepeated",
    "float_grid",
    "grid_points",
    "make_sampler",
    "noise_floor",
    "preload_gp",
    "space_points",
]
