"""The workload interface: what the user trains, and loading it from an entrypoint string."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import WorkloadError
from autotune.spec import BASE_LR, baseline_values, split_hyperparameters

if TYPE_CHECKING:
    from autotune.spec import StudySpec

__all__ = ["Workload", "default_optimizer", "is_stream", "load_workload", "study_workload"]


def default_optimizer(
    params: Iterable[Any],
    lr: float,
    *,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> Any:
    """AdamW at the given learning rate: the optimizer used when a workload names none. Its keyword
    arguments are searchable as ``hyperparameters: {optimizer.weight_decay: ...}``."""
    import torch

    beta1, beta2 = betas  # a list from a study file works too
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(beta1, beta2), eps=eps)


@dataclass(frozen=True)
class Workload:
    """What a study trains. autotune applies every knob itself around these pieces.

    Args:
        model: factory of the ``nn.Module``, called once in each rank.
        dataset: factory of a map-style ``torch.utils.data.Dataset``, or of a stream: a
            ``torch.utils.data.IterableDataset`` or a Hugging Face ``datasets.IterableDataset`` (no
            ``len()`` needed; autotune splits it by rank and DataLoader worker, see :func:`is_stream`).
        loss: ``loss(model, batch) -> scalar tensor``; the forward pass happens here.
        optimizer: ``optimizer(params, lr) -> torch.optim.Optimizer``; AdamW by default.
        base_lr: the learning rate that is right at ``base_batch_size``.
        base_batch_size: the global batch ``base_lr`` belongs to; the reference of ``lr_scaling``.
        checkpoint_modules: module types wrapped when ``activation_checkpointing`` is on.
        shard_modules: module types FSDP shards as units with ``sharding: fsdp``/``fsdp_no_reshard``
            (default: ``checkpoint_modules``); the root module is sharded after them.
        collate_fn: passed to the DataLoader.
        eval_dataset: optional held-out dataset factory (map-style or a stream).
        parallelize: ``parallelize(model, mesh, config) -> nn.Module``, called in each rank after the model is
            built and before autotune's own wrapping when ``tensor_parallel`` or ``pipeline_parallel`` is above 1:
            the workload applies its own tensor parallelism over ``mesh["tp"]`` (a ``DeviceMesh`` with axes
            ``pp``, ``dp``, ``tp``) and returns the model.
        tp_plan: the declarative tensor-parallel plan: module-name patterns (``fnmatch`` on the module's
            fully qualified name) to ``colwise``, ``rowwise`` or ``sequence``.
        pipeline_split: module names (fully qualified), each the first module of a new pipeline stage.
        pipeline_loss: ``pipeline_loss(output, target) -> scalar tensor``, the loss a pipeline computes on its
            last stage's output; under ``pipeline_parallel > 1`` a batch is ``(inputs, target)``, both split
            into micro-batches along their first dimension (docs/parallel.md).
    """

    model: Callable[[], Any]
    dataset: Callable[[], Any]
    loss: Callable[[Any, Any], Any]
    optimizer: Callable[[Iterable[Any], float], Any] = default_optimizer
    base_lr: float = 1e-3
    base_batch_size: int = 64
    checkpoint_modules: tuple[type, ...] = field(default_factory=tuple)
    shard_modules: tuple[type, ...] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    eval_dataset: Callable[[], Any] | None = None
    parallelize: Callable[[Any, Any, Any], Any] | None = None
    tp_plan: Mapping[str, str] | None = None
    pipeline_split: tuple[str, ...] | None = None
    pipeline_loss: Callable[[Any, Any], Any] | None = None

    def __post_init__(self) -> None:
        _refuse_instances(self)
        for name in ("model", "dataset", "loss", "optimizer"):
            if not callable(getattr(self, name)):
                kind = type(getattr(self, name)).__name__
                raise WorkloadError(f"Workload.{name} must be callable, got {kind}")
        for name in ("collate_fn", "eval_dataset", "parallelize", "pipeline_loss"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise WorkloadError(f"Workload.{name} must be callable or None, got {type(value).__name__}")
        lr = self.base_lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise WorkloadError(f"Workload.base_lr must be a positive number, got {self.base_lr!r}")
        size = self.base_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise WorkloadError(f"Workload.base_batch_size must be a positive integer, got {size!r}")
        modules = self.checkpoint_modules
        if isinstance(modules, type):
            modules = (modules,)
        modules = tuple(modules)
        for m in modules:
            if not isinstance(m, type):
                raise WorkloadError(f"Workload.checkpoint_modules must hold module types, got {m!r}")
        object.__setattr__(self, "checkpoint_modules", modules)
        shard = self.shard_modules
        if shard is not None:
            shard = (shard,) if isinstance(shard, type) else tuple(shard)
            for m in shard:
                if not isinstance(m, type):
                    raise WorkloadError(f"Workload.shard_modules must hold module types, got {m!r}")
            object.__setattr__(self, "shard_modules", shard)
        _check_mesh_fields(self)

    @property
    def shard_units(self) -> tuple[type, ...]:
        """The module types FSDP shards as units: ``shard_modules``, else ``checkpoint_modules``."""
        return self.shard_modules if self.shard_modules is not None else self.checkpoint_modules


TP_STYLES = ("colwise", "rowwise", "sequence")
"""The styles a ``Workload.tp_plan`` entry takes (DTensor's ColwiseParallel, RowwiseParallel, SequenceParallel)."""


def _check_mesh_fields(workload: Workload) -> None:
    """``tp_plan`` maps name patterns to a style of :data:`TP_STYLES`; ``pipeline_split`` is module names."""
    plan, split = workload.tp_plan, workload.pipeline_split
    if plan is not None:
        bad = [(k, v) for k, v in plan.items() if not isinstance(k, str) or v not in TP_STYLES] if plan else [("", "")]
        if not isinstance(plan, Mapping) or bad:
            raise WorkloadError(f"Workload.tp_plan: {bad[0][0]!r} -> {bad[0][1]!r}; map module-name patterns to "
                                f"{', '.join(TP_STYLES)}")
        object.__setattr__(workload, "tp_plan", dict(plan))
    if split is not None:
        split = (split,) if isinstance(split, str) else tuple(split)
        if not split or not all(isinstance(name, str) and name for name in split):
            raise WorkloadError(f"Workload.pipeline_split: give module names, each the first of a stage, not {split!r}")
        object.__setattr__(workload, "pipeline_split", split)


def is_stream(dataset: Any) -> bool:
    """Whether ``dataset`` is read as a stream (iterated, never indexed): a ``torch.utils.data.IterableDataset``
    or a Hugging Face ``datasets.IterableDataset`` (which becomes a torch one only once torch is imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dataset, torch.utils.data.IterableDataset):
        return True
    kind = type(dataset)
    return kind.__module__.split(".")[0] == "datasets" and kind.__name__ == "IterableDataset"


def _refuse_instances(workload: Workload) -> None:
    """``model=Net()`` or ``dataset=TrainSet()`` where a factory is expected: a module is callable, so it
    would pass as one, and every trial would then call its forward() with no input."""
    torch = sys.modules.get("torch")
    if torch is None:  # nothing can be a torch module or dataset
        return
    for name, base, example in (
        ("model", torch.nn.Module, "model=lambda: {0}(...), or the class itself"),
        ("dataset", torch.utils.data.Dataset, "dataset=lambda: {0}(...)"),
        ("eval_dataset", torch.utils.data.Dataset, "eval_dataset=lambda: {0}(...)"),
    ):
        value = getattr(workload, name)
        if isinstance(value, base):
            kind = type(value).__name__
            raise WorkloadError(
                f"Workload.{name} is a {kind} instance, not a factory (each rank builds its own); "
                f"pass {example.format(kind)}"
            )


def _import_target(entrypoint: str, base_dir: Path) -> Callable[..., Any]:
    target, _, func_name = entrypoint.rpartition(":")
    if target.endswith(".py") or "/" in target or target.startswith("."):
        path = Path(target)
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise WorkloadError(
                f"{entrypoint}: file {path} does not exist; the path is relative to the study file"
            )
        module_name = "autotune_workload_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise WorkloadError(f"{entrypoint}: cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            # Let the file import its neighbours, as `python file.py` would; write no __pycache__ into the
            # user's folder (validating a study writes nothing).
            sys.path.insert(0, str(path.parent))
            dont_write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[module_name]
                raise WorkloadError(f"{entrypoint}: importing {path.name} raised {_brief(e)}{_DEBUG}") from e
            finally:
                sys.dont_write_bytecode = dont_write_bytecode
                sys.path.remove(str(path.parent))
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name is None or not (target == e.name or target.startswith(e.name + ".")):
                # The module exists; something it imports does not.
                raise WorkloadError(f"{entrypoint}: importing {target} raised {_brief(e)}{_DEBUG}") from e
            raise WorkloadError(f"{entrypoint}: no module named {e.name!r}; check the module path") from None
        except Exception as e:
            raise WorkloadError(f"{entrypoint}: importing {target} raised {_brief(e)}{_DEBUG}") from e
    func = getattr(module, func_name, None)
    if func is None:
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        import difflib

        hint = difflib.get_close_matches(func_name, names, n=1)
        fix = f"did you mean {hint[0]!r}?" if hint else "check the function name"
        raise WorkloadError(f"{entrypoint}: {target} has no {func_name!r}; {fix}")
    if not callable(func):
        raise WorkloadError(f"{entrypoint}: {func_name!r} is not callable")
    return func


def load_workload(
    entrypoint: str,
    args: dict[str, Any] | None = None,
    base_dir: Path | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
) -> Workload:
    """Import ``module:function`` or ``path/file.py:function`` and call it with ``args``.

    ``hyperparameters`` (study-file names) add their build() arguments to ``args``: every name but
    ``optimizer.*``, and ``base_lr`` only when the function takes it. Raises WorkloadError (one line) when
    the import fails, an argument is not one of the function's, the call raises, or the result is not a
    Workload.
    """
    func = _import_target(entrypoint, base_dir or Path.cwd())
    if hyperparameters:
        args = {**(args or {}), **build_arguments(func, hyperparameters)}
    unknown = unknown_arguments(func, args or {})
    if unknown:
        raise WorkloadError(f"{entrypoint}: {unknown_argument_message(func, unknown[0])}")
    try:
        result = func(**(args or {}))
    except TypeError as e:
        raise WorkloadError(f"{entrypoint}: calling it with args {args or {}} failed: {e}") from e
    except WorkloadError:
        raise
    except Exception as e:
        raise WorkloadError(f"{entrypoint}: calling it raised {_brief(e)}{_DEBUG}") from e
    if not isinstance(result, Workload):
        raise WorkloadError(
            f"{entrypoint}: returned {type(result).__name__}, not autotune.Workload; "
            "return autotune.Workload(...)"
        )
    return result


# One build per spec: id(spec) -> (a weak reference to the spec, its Workload); the entry goes with the spec.
_BUILT: dict[int, tuple[weakref.ref[StudySpec], Workload]] = {}


def study_workload(spec: StudySpec) -> Workload:
    """The study's :class:`Workload`: its entrypoint imported and called once per spec, then cached.

    With ``hyperparameters:`` build() is called with the baseline's values (its own defaults)."""
    built = _BUILT.get(id(spec))
    if built is not None and built[0]() is spec:
        return built[1]
    hyperparameters = None
    if spec.hyperparameters:
        build = workload_function(spec.workload.entrypoint, spec.base_dir)
        hyperparameters = baseline_values(spec.hyperparameters, keyword_defaults(build))
    workload = load_workload(spec.workload.entrypoint, spec.workload.args, spec.base_dir, hyperparameters)
    key = id(spec)
    _BUILT[key] = (weakref.ref(spec, lambda _ref: _BUILT.pop(key, None)), workload)
    return workload


def build_arguments(func: Callable[..., Any], hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters that are keyword arguments of the workload's ``func``: all but
    ``optimizer.<kwarg>``, and ``base_lr`` only when ``func`` takes it (else it sets Workload.base_lr)."""
    build, base_lr, _ = split_hyperparameters(hyperparameters)
    accepted, _var_keyword = keyword_parameters(func)
    if base_lr is not None and BASE_LR in accepted:
        build[BASE_LR] = base_lr
    return build


def workload_function(entrypoint: str, base_dir: Path | None = None) -> Callable[..., Any]:
    """The function an entrypoint names, imported (WorkloadError when it cannot be)."""
    return _import_target(entrypoint, base_dir or Path.cwd())


def keyword_parameters(func: Callable[..., Any], skip: int = 0) -> tuple[list[str], bool]:
    """``(names, takes **kwargs)`` of the arguments ``func`` accepts by keyword, less its first ``skip``
    positional ones (an optimizer factory's ``params, lr``)."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: accept anything
        return [], True
    names: list[str] = []
    var_keyword = False
    for i, p in enumerate(parameters):
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) and i >= skip:
            names.append(p.name)
    return names, var_keyword


def keyword_defaults(func: Callable[..., Any]) -> dict[str, Any]:
    """The default value of each keyword argument of ``func`` that has one."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def unknown_arguments(func: Callable[..., Any], names: Iterable[str], skip: int = 0) -> list[str]:
    """The names in ``names`` that ``func`` does not accept as keyword arguments."""
    accepted, var_keyword = keyword_parameters(func, skip)
    return [] if var_keyword else [n for n in names if n not in accepted]


def unknown_argument_message(func: Callable[..., Any], name: str, skip: int = 0) -> str:
    """``build() takes no argument 'x'; its parameters: a, b`` (with a close match when there is one)."""
    import difflib

    accepted, _ = keyword_parameters(func, skip)
    hint = difflib.get_close_matches(name, accepted, n=1)
    hint_text = f"did you mean {hint[0]!r}? " if hint else ""
    listed = ", ".join(accepted) if accepted else "none"
    function = getattr(func, "__name__", "the function")
    return f"{function}() takes no argument {name!r}; {hint_text}its parameters: {listed}"


_DEBUG = "; fix the workload (autotune --debug shows the traceback)"


def _brief(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
