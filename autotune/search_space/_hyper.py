"""Hyperparameters: the study file's ``hyperparameters:`` as Optuna params ``hp.<name>``.

Separate from the knobs: a knob is something autotune applies itself (a DataLoader, DDP, autocast); a
hyperparameter is handed to the user's code — a keyword argument of the workload's ``build()``, the
``base_lr`` that ``lr_scaling`` scales, or a keyword argument of the optimizer factory
(``optimizer.weight_decay``). Each is fixed or searched; searched ones are Optuna params named
``hp.<name>``. A choice that Optuna cannot store (a list such as AdamW's ``betas``) is stored as its JSON
text and decoded when suggested.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.spec import (
    BASE_LR,
    OPTIMIZER_PREFIX,
    Choices,
    Fixed,
    FloatRange,
    HyperparameterSpec,
    IntRange,
    baseline_values,
    only_value,
    single_value,
)

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

PARAM_PREFIX = "hp."
_SCALARS = (type(None), bool, int, float, str)


def param_name(name: str) -> str:
    """The Optuna param of a hyperparameter: ``hp.<name>``."""
    return PARAM_PREFIX + name


def _scalar(value: Any) -> bool:
    return isinstance(value, _SCALARS)


def _encode(value: Any) -> Any:
    """A choice as Optuna stores it: scalars as they are, anything else as its JSON text."""
    return value if _scalar(value) else json.dumps(value)


def _decode(choices: tuple[Any, ...], stored: Any) -> Any:
    for choice in choices:
        if _encode(choice) == stored:
            return choice
    return stored


@dataclass
class HyperparameterSpace:
    """The hyperparameters of a study: their specs and the value each takes in the baseline.

    ``defaults`` is the baseline's value of every hyperparameter: the default of the ``build()`` (or
    optimizer) argument when it has one, the workload's own ``base_lr``, else the middle of a range (the
    geometric middle of a log range) or the first choice.
    """

    specs: dict[str, HyperparameterSpec] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        specs: Mapping[str, HyperparameterSpec],
        *,
        build_defaults: Mapping[str, Any] | None = None,
        base_lr: float | None = None,
        optimizer_defaults: Mapping[str, Any] | None = None,
    ) -> HyperparameterSpace:
        known: dict[str, Any] = {f"{OPTIMIZER_PREFIX}{k}": v for k, v in (optimizer_defaults or {}).items()}
        known.update(build_defaults or {})
        if base_lr is not None:
            known[BASE_LR] = base_lr
        return cls(specs=dict(specs), defaults=baseline_values(specs, known))

    # -- which are searched -------------------------------------------------------------------------------
    def searched(self) -> list[str]:
        """Hyperparameters with more than one possible value (the names, without ``hp.``)."""
        return [n for n, s in self.specs.items() if not single_value(s)]

    def distributions(self) -> dict[str, BaseDistribution]:
        """The Optuna distribution of every searched hyperparameter, keyed ``hp.<name>``."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out: dict[str, BaseDistribution] = {}
        for name in self.searched():
            spec = self.specs[name]
            if isinstance(spec, IntRange):
                out[param_name(name)] = IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
            elif isinstance(spec, FloatRange):
                out[param_name(name)] = FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
            elif isinstance(spec, Choices):
                out[param_name(name)] = CategoricalDistribution([_encode(c) for c in spec.choices])
        return out

    # -- values -------------------------------------------------------------------------------------------
    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask Optuna for every searched hyperparameter; fixed ones take their value."""
        values: dict[str, Any] = {}
        for name, spec in self.specs.items():
            key = param_name(name)
            if single_value(spec):
                values[name] = only_value(spec)
            elif isinstance(spec, IntRange):
                values[name] = trial.suggest_int(key, spec.low, spec.high, log=spec.log, step=spec.step)
            elif isinstance(spec, FloatRange):
                values[name] = trial.suggest_float(key, spec.low, spec.high, log=spec.log, step=spec.step)
            else:
                assert isinstance(spec, Choices)  # the union has four members
                stored = trial.suggest_categorical(key, [_encode(c) for c in spec.choices])
                values[name] = _decode(spec.choices, stored)
        return values

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every hyperparameter's value: ``given`` ones, else the single value, else the baseline's."""
        return {name: given[name] if name in given else self.defaults[name] for name in self.specs}

    def params_of(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna params (``hp.<name>``) of searched hyperparameter values, for enqueue_trial."""
        return {param_name(n): _encode(values[n]) for n in self.searched() if n in values}

    def contains(self, values: Mapping[str, Any]) -> bool:
        """Whether every hyperparameter has a value inside its spec."""
        return set(values) == set(self.specs) and all(_admits(self.specs[n], v) for n, v in values.items())


def _admits(spec: HyperparameterSpec, value: Any) -> bool:
    if isinstance(spec, Fixed):
        return bool(value == spec.value)
    if isinstance(spec, Choices):
        return any(value == c for c in spec.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(spec, IntRange):
        return isinstance(value, int) and spec.low <= value <= spec.high and (value - spec.low) % spec.step == 0
    return spec.low - 1e-12 <= value <= spec.high + 1e-12
