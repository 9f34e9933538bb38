"""SearchSpace: the study file's search_space turned into Optuna suggestions and TrialConfigs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.knobs import DDP_ONLY, KNOBS, PIPELINE_ONLY
from autotune.search_space._config import TrialConfig, uses_ddp
from autotune.search_space._device import CUDA_ONLY, drop_value, thread_count_notes
from autotune.search_space._hyper import HyperparameterSpace
from autotune.search_space._mesh import (
    MESH_PARAM,
    Layout,
    choose_layout,
    feasible_layouts,
    layout_of,
    mesh_in_play,
    mesh_problem,
)
from autotune.search_space._sets import ENV_PARAM_PREFIX, parse_sets
from autotune.search_space._split import SPLIT_KNOBS, SPLIT_PARAM, BatchSplit, admits, choose_split, feasible_splits
from autotune.spec import (
    BASE_LR,
    Choices,
    Fixed,
    IntRange,
    KnobSpec,
    SearchSpaceSpec,
    only_value,
    single_value,
)

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from autotune.workload_check import MeshFacts

# Suggestion order: a conditional knob after the knob it depends on (prefetch after workers, DDP's after sharding).
_ORDER = tuple(n for n in KNOBS if n not in DDP_ONLY) + DDP_ONLY


@dataclass
class SearchSpace:
    """Knob specs resolved for one device, with the workload's learning-rate reference.

    Every knob has a spec here: the study file's, or its default as a :class:`Fixed`. ``notes`` says
    what was adjusted (CUDA-only values dropped on a CPU run with ``device: auto``).

    ``global_batch`` holds the study's ``constraints.global_batch`` (empty: not held) and ``splits`` its feasible
    splits (:func:`~autotune.search_space._split.feasible_splits`): batch_size, grad_accum and world_size are
    then one Optuna param, ``batch_split``, and lr_scaling is ``none`` (the learning rate is base_lr in every trial).
    """

    knobs: dict[str, KnobSpec]
    base_lr: float
    base_batch_size: int
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)
    env: dict[str, KnobSpec] = field(default_factory=dict)  # the study's env: section (Fixed or Choices)
    hyper: HyperparameterSpace = field(default_factory=HyperparameterSpace)  # the hyperparameters: section
    global_batch: tuple[int, ...] = ()
    splits: tuple[BatchSplit, ...] = ()
    facts: MeshFacts | None = None  # what the model allows of a mesh (None: not read)
    layouts: tuple[Layout, ...] = ()  # the feasible meshes, where a tensor or pipeline degree above 1 can occur
    dropped: dict[str, str] = field(default_factory=dict)  # meshes of the space that cannot run, and why

    @classmethod
    def build(
        cls, spec: SearchSpaceSpec, *, base_lr: float, base_batch_size: int, device: str = "cpu",
        env: Mapping[str, KnobSpec] | None = None,
        hyper: HyperparameterSpace | None = None, global_batch: tuple[int, ...] = (),
        facts: MeshFacts | None = None,
    ) -> SearchSpace:
        """The space of a study's knobs; with a held ``global_batch``, its feasible splits (NoFeasibleSplit, a
        ValueError, when a held value has none) and lr_scaling fixed to none; where a tensor or pipeline degree
        above 1 can occur, its feasible meshes on the model ``facts`` describe (NoFeasibleMesh, a ValueError,
        when none is)."""
        notes: list[str] = []
        knobs: dict[str, KnobSpec] = {}
        for name, knob in KNOBS.items():
            value = getattr(spec, name)
            if value is None:
                default = base_batch_size if name == "batch_size" else knob.default
                value = Fixed(value=default)
            if device != "cuda" and name in CUDA_ONLY:
                value = drop_value(name, value, CUDA_ONLY[name], notes)
            knobs[name] = value
        if device != "cuda":
            notes += thread_count_notes(knobs)
        layouts: tuple[Layout, ...] = ()
        dropped: dict[str, str] = {}
        if mesh_in_play(knobs):
            layouts, dropped = feasible_layouts(knobs, facts, global_batch)
            splits = tuple(dict.fromkeys(BatchSplit(lay.batch_size or 0, lay.grad_accum or 0, lay.world_size)
                                         for lay in layouts)) if global_batch else ()
        else:
            splits = feasible_splits(global_batch, knobs) if global_batch else ()
        if global_batch:
            if spec.lr_scaling is not None and spec.lr_scaling != Fixed(value="none"):
                notes.append("lr_scaling: not applied: the global batch is held (constraints.global_batch), so the "
                             "learning rate is base_lr in every trial")
            knobs["lr_scaling"] = Fixed(value="none")
        return cls(knobs=knobs, base_lr=base_lr, base_batch_size=base_batch_size, device=device, notes=notes,
                   env=dict(env or {}), hyper=hyper or HyperparameterSpace(), global_batch=tuple(global_batch),
                   splits=splits, facts=facts, layouts=layouts, dropped=dropped)

    # -- which knobs are searched ---------------------------------------------------------------------
    def searched(self) -> list[str]:
        """Knobs with more than one possible value, each its own Optuna param (under a held global batch
        batch_size, grad_accum and world_size are not: their split is, :meth:`split_searched`)."""
        held = self.joined()
        return [n for n, s in self.knobs.items() if not single_value(s) and n not in held]

    def joined(self) -> tuple[str, ...]:
        """The knobs searched together as one param (``mesh``, or ``batch_split``), not each as its own."""
        if self.layouts:
            return (*self.layouts[0].knobs(), *(SPLIT_KNOBS if self.global_batch else ()))
        return SPLIT_KNOBS if self.global_batch else ()

    def split_searched(self) -> bool:
        """Whether the split of a held global batch is searched as ``batch_split`` (more than one feasible split,
        and no mesh: the mesh's param carries the split)."""
        return len(self.splits) > 1 and not self.layouts

    def mesh_searched(self) -> bool:
        """Whether the mesh is searched (``mesh``: more than one feasible layout)."""
        return len(self.layouts) > 1

    def searched_env(self) -> list[str]:
        """Variables of the ``env:`` section with more than one value (Optuna params ``env.NAME``)."""
        return [n for n, s in self.env.items() if not single_value(s)]

    def distributions(self) -> dict[str, BaseDistribution]:
        """The Optuna distribution of every searched knob (prefetch_factor's applies when num_workers > 0,
        bucket_cap_mb's, gradient_as_bucket_view's and static_graph's when sharding is ddp) and of every
        searched environment variable (``env.NAME``)."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        out: dict[str, BaseDistribution] = {}
        for name in self.searched():
            spec = self.knobs[name]
            if isinstance(spec, IntRange):
                out[name] = IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
            elif isinstance(spec, Choices):
                out[name] = CategoricalDistribution(list(spec.choices))
        if self.split_searched():
            out[SPLIT_PARAM] = CategoricalDistribution([s.label for s in self.splits])
        if self.mesh_searched():
            out[MESH_PARAM] = CategoricalDistribution([lay.label for lay in self.layouts])
        for name in self.searched_env():
            env_spec = self.env[name]
            assert isinstance(env_spec, Choices)
            out[ENV_PARAM_PREFIX + name] = CategoricalDistribution(list(env_spec.choices))
        out.update(self.hyper.distributions())  # hp.<name>
        return out

    # -- making configs -------------------------------------------------------------------------------
    def suggest(self, trial: optuna.Trial) -> TrialConfig:
        """Ask Optuna for a value of every searched knob and return the trial's TrialConfig.

        ``prefetch_factor`` is only suggested when ``num_workers > 0``, DDP's own knobs only when
        ``sharding`` is ddp (they mean nothing otherwise), and ``static_graph`` only at ``grad_accum`` 1 (false
        above it: DDP's no_sync() fails under a static graph). Searched ``env:`` variables are ``env.NAME``.
        """
        values: dict[str, Any] = {}
        if self.layouts:  # the mesh first (with the split, under a held global batch): DDP's knobs depend on it
            labels = [lay.label for lay in self.layouts]
            label = trial.suggest_categorical(MESH_PARAM, labels) if len(labels) > 1 else labels[0]
            values.update(Layout.parse(str(label)).knobs())
        elif self.global_batch:  # the split first: static_graph depends on grad_accum
            labels = [s.label for s in self.splits]
            label = trial.suggest_categorical(SPLIT_PARAM, labels) if len(labels) > 1 else labels[0]
            values.update(BatchSplit.parse(str(label))._asdict())
        for name in _ORDER:
            spec = self.knobs[name]
            if name in values:  # the split's knobs
                continue
            if name == "prefetch_factor" and values["num_workers"] == 0:
                values[name] = None
                continue
            if name in DDP_ONLY and not uses_ddp(values):
                values[name] = None
                continue
            if name in PIPELINE_ONLY and values["pipeline_parallel"] == 1:
                values[name] = None
                continue
            if name == "static_graph" and values["grad_accum"] > 1:  # STATIC_GRAPH_WITH_ACCUMULATION
                values[name] = False
                continue
            if name == "compile" and _on_mesh(values):  # a tensor or pipeline mesh runs uncompiled
                values[name] = "off"
                continue
            if single_value(spec):
                values[name] = only_value(spec)
            elif isinstance(spec, IntRange):
                values[name] = trial.suggest_int(name, spec.low, spec.high, log=spec.log, step=spec.step)
            else:
                assert isinstance(spec, Choices)
                values[name] = trial.suggest_categorical(name, list(spec.choices))
        env = {}
        for var, env_spec in self.env.items():
            if single_value(env_spec):
                env[var] = only_value(env_spec)
            else:
                assert isinstance(env_spec, Choices)
                env[var] = trial.suggest_categorical(ENV_PARAM_PREFIX + var, list(env_spec.choices))
        values["env"] = env
        values["hyperparameters"] = self.hyper.suggest(trial)
        return self.config(values)

    def config(self, values: Mapping[str, Any]) -> TrialConfig:
        """A TrialConfig from knob values; knobs not given take their single value or their default.

        ``values["env"]``, when given, is the trial's environment; else the ``env:`` section's fixed
        variables (a searched variable is left unset: the default environment).
        """
        full: dict[str, Any] = {}
        full["env"] = dict(values["env"]) if "env" in values else self.fixed_env()
        hyperparameters = self.hyper.values(values.get("hyperparameters", {}))
        for name, spec in self.knobs.items():
            if name in values:
                full[name] = values[name]
            elif single_value(spec):
                full[name] = only_value(spec)
            else:
                default = self.base_batch_size if name == "batch_size" else KNOBS[name].default
                full[name] = default
        if self.layouts and self.global_batch:
            # the knobs not given complete a feasible layout (the first that agrees with those given)
            full.update(choose_layout(self.layouts, values).knobs())
        elif self.global_batch:  # the knobs not given complete a feasible split (the first that agrees); one lr
            full.update(choose_split(self.splits, values)._asdict())
        if self.global_batch:
            full["lr_scaling"] = "none"
        problem = mesh_problem(full, self.facts)
        if problem is not None:
            raise ValueError(problem)
        return TrialConfig.create(
            base_lr=hyperparameters.get(BASE_LR, self.base_lr), base_batch_size=self.base_batch_size,
            device=self.device, hyperparameters=hyperparameters, **full  # type: ignore[arg-type]
        )

    def fixed_env(self) -> dict[str, str]:
        """The ``env:`` variables fixed to one value."""
        return {n: str(only_value(s)) for n, s in self.env.items() if single_value(s)}

    def default_config(self, overrides: Mapping[str, Any] | None = None) -> TrialConfig:
        """The workload's default configuration (the baseline): num_workers 0, fp32, no checkpointing,
        bucket 25 MB, base batch, one rank — whatever the search space says — then ``overrides``."""
        values: dict[str, Any] = {
            name: (self.base_batch_size if name == "batch_size" else knob.default)
            for name, knob in KNOBS.items() if not (self.global_batch and name in self.joined())
        }
        values.update(overrides or {})
        return self.config(values)

    def params_of(self, config: TrialConfig) -> dict[str, Any]:
        """The Optuna params a config corresponds to (for enqueue_trial); only searched knobs."""
        params: dict[str, Any] = {}
        for name in self.searched():
            value = getattr(config, name)
            if (name == "prefetch_factor" or name in DDP_ONLY or name in PIPELINE_ONLY) and value is None:
                continue
            if name == "static_graph" and config.grad_accum > 1:  # not suggested there (see suggest)
                continue
            if name == "compile" and _on_mesh(config.knobs()):
                continue
            params[name] = value
        if self.split_searched():
            params[SPLIT_PARAM] = BatchSplit(config.batch_size, config.grad_accum, config.world_size).label
        layout = layout_of(config, self.layouts) if self.mesh_searched() else None
        if layout is not None:
            params[MESH_PARAM] = layout.label
        for name in self.searched_env():
            if name in config.env:
                params[ENV_PARAM_PREFIX + name] = config.env[name]
        params.update(self.hyper.params_of(config.hyperparameters))
        return params

    def contains(self, config: TrialConfig) -> bool:
        """Whether every knob of ``config`` lies in this space (and prefetch follows num_workers, static_graph is
        false above grad_accum 1)."""
        if self.layouts:
            if layout_of(config, self.layouts) is None:
                return False
        elif self.global_batch and BatchSplit.of(config.knobs()) not in self.splits:
            return False
        for name, spec in self.knobs.items():
            value = getattr(config, name)
            if name == "prefetch_factor" and config.num_workers == 0:
                if value is not None:
                    return False
                continue
            if name in DDP_ONLY and not uses_ddp(config.knobs()):
                if value is not None:
                    return False
                continue
            if name in PIPELINE_ONLY and config.pipeline_parallel == 1:
                if value is not None:
                    return False
                continue
            if name == "static_graph" and config.grad_accum > 1:  # false there, whatever the space says
                if value:
                    return False
                continue
            if name == "compile" and _on_mesh(config.knobs()):  # off there, whatever the space says
                if value != "off":
                    return False
                continue
            if not admits(spec, value):
                return False
        for name, env_spec in self.env.items():
            if name not in config.env or not admits(env_spec, config.env[name]):
                return False
        return set(config.env) <= set(self.env) and self.hyper.contains(config.hyperparameters)

    def parse_sets(self, sets: list[str]) -> dict[str, Any]:
        """Parse ``knob=value`` strings (``--set batch_size=64``) into checked knob values."""
        return parse_sets(sets, env=self.env, fixed_env=self.fixed_env(), base_batch_size=self.base_batch_size,
                          device=self.device)


def _on_mesh(values: Mapping[str, Any]) -> bool:
    """Whether a configuration runs a tensor- or pipeline-parallel mesh (compile is off there)."""
    return bool(values.get("tensor_parallel", 1) > 1 or values.get("pipeline_parallel", 1) > 1)
