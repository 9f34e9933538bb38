"""Calibration: ``autotune.calibrate()``, the first step of a training launcher, and what it returns.

:func:`calibrate` runs (or resumes) a study and returns a :class:`Calibration` of its choice;
:func:`load_calibration` reads an existing study's choice (inside a rank, say). The Hugging Face and
Lightning integrations are tables of keyword arguments (``Calibration.to_hf_training_arguments()``,
``Calibration.to_lightning()``).
"""

from autotune.calibration._calibrate import calibrate, load_calibration
from autotune.calibration._calibration import Calibration
from autotune.calibration._integrations import (
    DDP_ARGUMENTS,
    HF_TRAINING_ARGUMENTS,
    LIGHTNING_TRAINER,
    SKIP,
    hf_training_arguments,
    lightning_kwargs,
)

__all__ = [
    "DDP_ARGUMENTS",
    "HF_TRAINING_ARGUMENTS",
    "LIGHTNING_TRAINER",
    "SKIP",
    "Calibration",
    "calibrate",
    "hf_training_arguments",
    "lightning_kwargs",
    "load_calibration",
]
