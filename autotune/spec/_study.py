"""StudySpec: a whole study file, its cross-field checks and the values resolved from it (paths, storage)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from autotune.knobs import DDP_ONLY, KNOBS, MESH_KNOBS
from autotune.spec._env import EnvField
from autotune.spec._hyperparameters import (
    BASE_LR,
    HP_NAME_RE,
    HyperparameterField,
    positive_values,
    single_value,
)
from autotune.spec._knobs import STRICT, IntRange, SearchSpaceSpec, unknown_knob_message
from autotune.spec._sections import (
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
from autotune.spec._text import redact_url

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class StudySpec(BaseModel):
    """A whole study file."""

    model_config = STRICT
    name: str = Field(description="Optuna study name: letters, digits, '.', '_' and '-'")
    storage: str | None = Field(
        None, description="SQLAlchemy URL; default: an SQLite file beside the study file"
    )
    workload: WorkloadSpec
    launcher: LauncherSpec = Field(default_factory=LauncherSpec)
    search_space: SearchSpaceSpec = Field(default_factory=SearchSpaceSpec)
    hyperparameters: dict[str, HyperparameterField] = Field(
        default_factory=dict,
        description="keyword arguments of the workload's build(), base_lr and optimizer.<kwarg>: fixed or "
        "searched (Optuna params hp.<name>)",
    )
    trial: TrialLimits = Field(default_factory=TrialLimits)
    objectives: tuple[ObjectiveSpec, ...] = Field(
        (ObjectiveSpec(metric="throughput"),), min_length=1, description="one: single objective; more: Pareto"
    )
    constraints: ConstraintsSpec = Field(default_factory=ConstraintsSpec)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    confirm: ConfirmSpec = Field(default_factory=ConfirmSpec)
    env: EnvField = Field(
        default_factory=dict,
        description="environment variables set in every rank; NAME: value fixes one, NAME: {choices: [...]} "
        "searches it (Optuna param env.NAME)",
    )
    baseline: dict[str, Any] = Field(
        default_factory=dict,
        description="knob values overriding the workload's default configuration for the baseline trial",
    )
    warm_start: bool = Field(
        True, strict=True,
        description="start a new study from the best configurations of earlier studies in the same storage "
        "with the same (or a close) machine and model; false: start from nothing",
    )

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="<python>")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a safe study name; use letters, digits, '.', '_' and '-' "
                "(no '/', no spaces, starting with a letter or digit)"
            )
        return value

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except (ArgumentError, ValueError):  # ValueError: a port that is not a number
            raise ValueError(
                f"{redact_url(value)!r} is not a database URL; write e.g. sqlite:///study.db or "
                "postgresql+psycopg://user@host/db"
            ) from None
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql", "mysql"):
            raise ValueError(f"unsupported database {backend!r}; use sqlite, postgresql or mysql")
        if backend == "sqlite" and not url.database:
            raise ValueError("an SQLite URL needs a file: sqlite:///path/to/study.db")
        if backend != "sqlite" and not url.host and not url.query.get("host"):
            raise ValueError(f"a {backend} URL needs a host: {backend}+driver://user@host/database")
        return value

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline_knobs(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("baseline must be a mapping of knob: value")
        for key, knob_value in value.items():
            if key not in KNOBS:
                raise ValueError(unknown_knob_message(str(key)))
            try:
                KNOBS[key].check_value(knob_value)
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> StudySpec:
        for name, hp in self.hyperparameters.items():
            if not HP_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"hyperparameters: {name!r} is not a keyword argument name; give a build() argument, "
                    "base_lr or optimizer.<argument>"
                )
            if name == BASE_LR and not positive_values(hp):
                raise ValueError(f"hyperparameters.{name}: the learning rate must be a positive number")
        both = sorted(set(self.hyperparameters) & set(self.workload.args))
        if both:
            raise ValueError(
                f"hyperparameters.{both[0]}: also given in workload.args; give it in one place"
            )
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives: a metric is listed twice; list each metric once")
        multi = len(self.objectives) > 1
        if multi and self.sampler.name == "cmaes":
            raise ValueError("sampler.name: cmaes handles one objective only; use nsga2, tpe or gp")
        if self.launcher.device == "cpu":
            amp = self.search_space.values_of("amp")
            if amp is not None and "fp16" in amp:
                raise ValueError(
                    "search_space.amp: fp16 needs CUDA (GradScaler); remove fp16 or set launcher.device: cuda"
                )
            pin = self.search_space.values_of("pin_memory")
            if pin is not None and True in pin:
                raise ValueError(
                    "search_space.pin_memory: pinned memory only helps on CUDA; remove true or set "
                    "launcher.device: cuda"
                )
            if self.baseline.get("amp") == "fp16":
                raise ValueError(
                    "baseline.amp: fp16 needs CUDA; use off or bf16, or set launcher.device: cuda"
                )
        self._check_nodes()
        self._check_compile()
        self._check_static_graph()
        self._check_mesh()
        return self

    def _check_mesh(self) -> None:
        """A tensor- or pipeline-parallel model is not wrapped in DDP and runs uncompiled: a study that fixes a
        degree above 1 cannot also fix one of DDP's own knobs, or compile on."""
        amp = self.search_space.values_of("amp") or ()
        stages = self.search_space.pipeline_parallel
        pipelined = (isinstance(stages, IntRange) and stages.high > 1) or any(
            v > 1 for v in self.search_space.values_of("pipeline_parallel") or ())
        if "fp16" in amp and pipelined:
            raise ValueError("search_space.amp: fp16 cannot meet pipeline_parallel above 1 (a pipeline has no "
                             "gradient scaler); use {choices: [off, bf16]} or keep pipeline_parallel at 1")
        fixed = {n: v[0] for n in MESH_KNOBS if len(v := self.search_space.values_of(n) or (1,)) == 1 and v[0] > 1}
        if not fixed:
            return
        mesh = " and ".join(f"{name} {value}" for name, value in fixed.items())
        for name in DDP_ONLY:
            if name in self.search_space.knobs():
                raise ValueError(f"search_space.{name}: applies to DDP only, and {mesh} runs no DDP (a tensor- or "
                                 f"pipeline-parallel model is not wrapped in it); remove {name}")
        modes = self.search_space.values_of("compile") or ("off",)
        if "off" not in modes:
            raise ValueError(f"search_space.compile: {modes[0]} does not combine with {mesh}; a tensor- or "
                             "pipeline-parallel mesh runs uncompiled: set compile: off")

    def _check_static_graph(self) -> None:
        """DDP's no_sync() (gradient accumulation) fails inside torch under a static graph (pytorch/pytorch#143580):
        a static_graph that is always true cannot meet a grad_accum above 1. A searched static_graph is only tried
        at grad_accum 1."""
        accum = getattr(self.search_space, "grad_accum", None)
        above_one = (isinstance(accum, IntRange) and accum.high > 1) or any(
            isinstance(v, int) and v > 1 for v in self.search_space.values_of("grad_accum") or ()
        )
        fixed = self.search_space.values_of("static_graph") == (True,)
        fix = "; use static_graph: {choices: [false, true]} (tried at grad_accum 1 only) or keep grad_accum at 1"
        why = "DDP's no_sync() under a static graph fails inside torch (pytorch/pytorch#143580)"
        if fixed and above_one:
            raise ValueError(f"search_space.static_graph: true cannot meet grad_accum above 1: {why}{fix}")
        if self.baseline.get("static_graph") and int(self.baseline.get("grad_accum", 1)) > 1:
            raise ValueError(f"baseline.static_graph: true cannot meet grad_accum above 1: {why}; set one of them "
                             "back")

    def _check_compile(self) -> None:
        """A compiled model compiles in its first step: that step must be a warm-up step, never measured."""
        modes = self.search_space.values_of("compile") or ()
        if self.baseline.get("compile", "off") != "off":
            modes = (*modes, self.baseline["compile"])
        if any(m != "off" for m in modes) and self.trial.warmup_steps < 1:
            raise ValueError(
                "trial.warmup_steps: compile compiles the model in the first step, which must not be measured; "
                "set warmup_steps: 1 or more"
            )

    def _check_nodes(self) -> None:
        """On SLURM a trial runs W / nodes ranks on each node: every world size must divide evenly."""
        nodes = self.launcher.nodes
        if self.launcher.kind != "slurm" or nodes == 1:
            return
        spec = self.search_space.world_size
        if isinstance(spec, IntRange):
            sizes: tuple[Any, ...] = tuple(range(spec.low, spec.high + 1, spec.step))
        else:
            sizes = self.search_space.values_of("world_size") or (KNOBS["world_size"].default,)
        odd = [w for w in sizes if w % nodes]
        if odd:
            raise ValueError(
                f"search_space.world_size: {odd[0]} ranks cannot be split over launcher.nodes ({nodes}); "
                f"give world sizes that are multiples of {nodes}, e.g. {{choices: [{nodes}, {2 * nodes}]}}"
            )
        baseline = self.baseline.get("world_size", KNOBS["world_size"].default)
        if baseline % nodes:
            raise ValueError(
                f"baseline.world_size: the baseline runs {baseline} rank(s), which cannot be split over "
                f"launcher.nodes ({nodes}); set baseline: {{world_size: {nodes}}}"
            )

    # -- resolved values --------------------------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the study file are resolved against (the study file's folder)."""
        return self._base_dir

    @property
    def source(self) -> str:
        """Where this spec came from, for messages: the study file's path or ``<python>``."""
        return self._source

    def storage_url(self) -> str:
        """The storage URL; relative SQLite paths are taken relative to the study file's folder."""
        if self.storage is None:
            return f"sqlite:///{(self.base_dir / (self.name + '.db')).resolve()}"
        from sqlalchemy.engine import make_url

        url = make_url(self.storage)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            path = Path(url.database)
            if not path.is_absolute():
                return str(url.set(database=str((self.base_dir / path).resolve())))
        return self.storage

    def evaluates(self, *, searching: bool) -> bool:
        """Whether a complete trial evaluates the workload's eval_dataset (``trial.evaluate``). With ``auto``, a
        search trial does when the study weighs how well it trains — an objective is a loss (loss, eval_loss,
        time_to_loss) or hyperparameters are searched — and not when it weighs speed and memory alone: each
        trial would spend that time, on the search's critical path, on a figure no decision reads. A trial
        measured for its own sake (a confirmation run, ``autotune trial``) always does."""
        mode = self.trial.evaluate
        if mode != "auto":
            return mode == "always"
        quality = any(o.metric in ("loss", "eval_loss", "time_to_loss") for o in self.objectives) or any(
            not single_value(hp) for hp in self.hyperparameters.values()
        )
        return not searching or quality

    def runs_dir(self) -> Path:
        """Where trial folders go: ``runs/<study name>/`` beside the study file."""
        return self.base_dir / "runs" / self.name

    def artifacts_dir(self) -> Path:
        """Where the trials' files are kept as Optuna artifacts: ``runs/<study name>/artifacts`` (the tuner
        writes them, the report's dashboard reads them)."""
        return self.runs_dir() / "artifacts"

    def bind(self, base_dir: Path, source: str) -> StudySpec:
        self._base_dir = base_dir
        self._source = source
        return self

    def resolved_device(self) -> str:
        """``cpu`` or ``cuda``; ``auto`` becomes cuda when torch sees a GPU."""
        if self.launcher.device != "auto":
            return self.launcher.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
