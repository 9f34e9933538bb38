"""The resolved study as a short rich summary: what ``autotune validate`` prints.

Everything shown is resolved: the storage URL with relative SQLite paths made absolute (passwords
hidden), the device ``auto`` turned into cpu or cuda, every knob's range or fixed value on that device,
and the workload's learning-rate reference.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.knobs import KNOBS
from autotune.search_space import SPLIT_KNOBS, SearchSpace, describe_splits, study_space
from autotune.spec import Choices, Fixed, FloatRange, HyperparameterSpec, IntRange, KnobSpec, StudySpec, redact_url
from autotune.workload import study_workload

__all__ = ["render_resolved_study"]


def render_resolved_study(spec: StudySpec, console: Console) -> None:
    """Print the resolved study: settings, the knobs, the env: section, notes, objectives and budget."""
    workload = study_workload(spec)
    space = study_space(spec)

    console.print(f"[bold]study[/] {escape(spec.name)}  [dim]({escape(spec.source)})[/]")
    settings = Table.grid(padding=(0, 2))
    settings.add_column(style="bold")
    settings.add_column()
    for key, value in _settings(spec, workload, space):
        settings.add_row(key, escape(value))
    console.print(settings)

    knobs = Table(title="search space", title_justify="left", show_edge=False, pad_edge=False)
    knobs.add_column("knob")
    knobs.add_column("mode")
    knobs.add_column("values")
    knobs.add_column("default", style="dim")
    searched = set(space.searched())
    no_workers = _describe(space.knobs["num_workers"]) in ("0", "{0}", "0..0")
    sharding = space.knobs["sharding"]
    no_ddp = "ddp" not in (sharding.choices if isinstance(sharding, Choices) else (getattr(sharding, "value", None),))
    split_default = space.default_config() if space.global_batch else None  # the first feasible split
    for name, knob_spec in space.knobs.items():
        default = workload.base_batch_size if name == "batch_size" else KNOBS[name].default
        if split_default is not None and name in SPLIT_KNOBS:
            default = getattr(split_default, name)
        values = _describe(knob_spec)
        if name == "prefetch_factor" and no_workers:
            values = "- (unused: num_workers is 0)"
        elif name == "prefetch_factor" and name in searched:
            values += " when num_workers > 0"
        elif KNOBS[name].ddp_only and no_ddp:
            values = f"- (unused: sharding is {_describe(sharding)})"
        elif KNOBS[name].ddp_only and name in searched and "sharding" in searched:
            values += " when sharding is ddp"
        mode = "searched" if name in searched else "fixed"
        if space.global_batch and name in SPLIT_KNOBS:
            mode = "split" if space.split_searched() else "fixed by the split"
        if space.layouts and name in space.joined():
            mode = "mesh" if space.mesh_searched() else "fixed by the mesh"
        if KNOBS[name].ddp_only and space.layouts and not no_ddp:
            values += " (not on a tensor or pipeline mesh)"
        knobs.add_row(name, mode, escape(values), escape(_show(default)))
    console.print(knobs)
    if space.global_batch and not space.layouts:
        console.print(escape(split_line(space)), highlight=False, soft_wrap=True)
    if space.layouts:
        console.print(mesh_table(space))
        for label, why in space.dropped.items():
            console.print(f"[yellow]not proposed[/] {escape(label)}: {escape(why)}", highlight=False, soft_wrap=True)
    if space.env:
        console.print(_env_table(space))
    if space.hyper.specs:
        console.print(_hyperparameter_table(space.hyper, spec.workload.entrypoint))
    for note in space.notes:
        console.print(f"[yellow]note[/] {escape(note)}")


def split_line(space: SearchSpace) -> str:
    """The feasible splits of a held global batch, as searched (Optuna param batch_split)."""
    held = ", ".join(str(g) for g in space.global_batch)
    count = len(space.splits)
    if count == 1:
        return (f"global batch {held} held: one feasible split (batch_size x grad_accum x world_size), "
                f"{space.splits[0].label}; search batch_size, grad_accum or world_size to vary it")
    return (f"global batch {held} held: {count} feasible splits (batch_size x grad_accum x world_size), searched as "
            f"batch_split: {describe_splits(space.splits)}")


def mesh_table(space: SearchSpace) -> Table:
    """The feasible meshes (Optuna param mesh): ranks, pp x dp x tp, the pipeline's schedules and micro-batches,
    and the sharding the data-parallel axis takes."""
    title = f"feasible meshes ({len(space.layouts)} layouts, searched as mesh)" if space.mesh_searched() else \
        "the mesh (fixed)"
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    carried = any(lay.batch_size is not None for lay in space.layouts)  # a batch split goes with the mesh
    for column in ("ranks", "pp x dp x tp", "pipeline", "sharding on dp", *(("batch",) if carried else ())):
        table.add_column(column)
    sharding = _describe(space.knobs["sharding"])
    rows: dict[tuple[int, int, int], list[Any]] = {}
    for lay in space.layouts:
        rows.setdefault((lay.pipeline_parallel, lay.data_parallel, lay.tensor_parallel), []).append(lay)
    for (pp, dp, tp), layouts in rows.items():
        pipeline = "-" if pp == 1 else ", ".join(sorted({f"{lay.pipeline_schedule} x{lay.pipeline_microbatches}"
                                                          for lay in layouts}))
        batches = sorted({(lay.batch_size, lay.grad_accum) for lay in layouts if lay.batch_size is not None},
                         key=lambda b: (b[0] or 0, b[1] or 0))
        batch = ", ".join(f"{b}x{a}" if a is not None else str(b) for b, a in batches) or "-"
        table.add_row(str(pp * dp * tp), f"{pp} x {dp} x {tp}", escape(pipeline),
                      sharding if dp > 1 else f"{sharding} (one replica)", *((escape(batch),) if carried else ()))
    return table


def _env_table(space: Any) -> Table:
    """The env: section: each variable, fixed or searched (Optuna param env.NAME), its values."""
    table = Table(title="environment of every rank", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("variable")
    table.add_column("mode")
    table.add_column("values")
    searched = set(space.searched_env())
    for name, env_spec in space.env.items():
        mode = "searched (env." + name + ")" if name in searched else "fixed"
        table.add_row(escape(name), escape(mode), escape(_describe(env_spec)))
    return table


def _hyperparameter_table(hyper: Any, entrypoint: str) -> Table:
    """The hyperparameters: name, where the value goes, fixed or searched (Optuna param), values, baseline."""
    from autotune.search_space import param_name
    from autotune.spec import BASE_LR, OPTIMIZER_PREFIX

    table = Table(title="hyperparameters", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("hyperparameter", "passed to", "mode", "values"):
        table.add_column(column)
    table.add_column("baseline", style="dim")
    searched = set(hyper.searched())
    function = entrypoint.rpartition(":")[2]
    for name, hp_spec in hyper.specs.items():
        if name == BASE_LR:
            target = "Workload.base_lr (scaled by lr_scaling)"
        elif name.startswith(OPTIMIZER_PREFIX):
            target = f"optimizer({name.removeprefix(OPTIMIZER_PREFIX)}=...)"
        else:
            target = f"{function}({name}=...)"
        mode = f"searched ({param_name(name)})" if name in searched else "fixed"
        table.add_row(name, escape(target), mode, escape(_describe(hp_spec)), escape(_show(hyper.defaults[name])))
    return table


def _settings(spec: StudySpec, workload: Any, space: SearchSpace) -> list[tuple[str, str]]:
    device = space.device
    launcher = spec.launcher
    where = f"{launcher.kind}, device {device}"
    if launcher.device == "auto":
        where += " (auto)"
    if launcher.kind == "slurm":
        where += f", {launcher.nodes} node(s)"
        if launcher.partition:
            where += f", partition {launcher.partition}"
        if launcher.time:
            where += f", time {launcher.time}"
        if launcher.srun_args:
            where += ", srun " + " ".join(launcher.srun_args)
    trial = spec.trial
    limits = (
        f"warmup {trial.warmup_steps}, max_steps {trial.max_steps}, max_seconds {_show(trial.max_seconds)}, "
        f"report every {trial.window()} step(s), hang after {_show(trial.hang_seconds)} s"
    )
    if trial.samples is not None:
        limits += f", samples {trial.samples}"
    if workload.eval_dataset is not None:  # trial.evaluate
        if spec.evaluates(searching=True):
            limits += ", held-out loss after every trial"
        elif spec.evaluates(searching=False):
            limits += ", held-out loss in confirmation runs"
    objectives = ", ".join(f"{o.metric} ({o.direction})" for o in spec.objectives)
    if len(spec.objectives) > 1:
        objectives += " - Pareto front"
    max_mem = spec.constraints.max_memory_mb
    constraints = [f"max_memory_mb {_show(max_mem)}"] if max_mem is not None else []
    if space.global_batch:
        constraints.append("global_batch " + ", ".join(str(g) for g in space.global_batch))
    lr_reference = f"base_lr {_show(workload.base_lr)} at global batch {workload.base_batch_size}"
    if space.global_batch:
        lr_reference = f"base_lr {_show(workload.base_lr)} in every trial (global batch held: lr_scaling not applied)"
    sampler = spec.sampler
    sampler_text: str = sampler.name + (f", seed {sampler.seed}" if sampler.seed is not None else "")
    if sampler.n_startup_trials is not None:
        sampler_text += f", {sampler.n_startup_trials} startup trials"
    pruner = spec.pruner
    pruner_text: str = pruner.name
    if pruner.name != "none":
        pruner_text += f", after {pruner.startup_trials()} trials"
        if pruner.name == "percentile":
            pruner_text += f", percentile {_show(pruner.percentile)}"
    budget = spec.budget
    budget_text = ", ".join(
        part
        for part in (
            f"{budget.n_trials} trials" if budget.n_trials is not None else "",
            f"{_show(budget.timeout_s)} s" if budget.timeout_s is not None else "",
        )
        if part
    ) or "unlimited"
    confirm = spec.confirm
    confirm_text = f"top {confirm.top_k} re-run {confirm.repeats} time(s)" if confirm.top_k > 0 else "off"
    args = ", ".join(f"{k}={_show(v)}" for k, v in spec.workload.args.items()) or "-"
    rows = [
        ("storage", redact_url(spec.storage_url())),
        ("workload", f"{spec.workload.entrypoint}({args})"),
        ("lr reference", lr_reference),
        ("launcher", where),
        ("trial", limits),
        ("objectives", objectives),
        ("constraints", ", ".join(constraints) or "-"),
        ("sampler", sampler_text),
        ("pruner", pruner_text),
        ("budget", budget_text),
        ("confirm", confirm_text),
        ("warm start", "from the closest earlier study in the storage" if spec.warm_start else "off"),
    ]
    if spec.baseline:
        rows.append(("baseline", ", ".join(f"{k}={_show(v)}" for k, v in spec.baseline.items())))
    return rows


def _describe(spec: KnobSpec | HyperparameterSpec) -> str:
    if isinstance(spec, Fixed):
        return _show(spec.value)
    if isinstance(spec, Choices):
        return "{" + ", ".join(_show(c) for c in spec.choices) + "}"
    assert isinstance(spec, (IntRange, FloatRange))  # the union's range members
    text = f"{_show(spec.low)}..{_show(spec.high)}"
    if spec.log:
        text += " log"
    if spec.step is not None and spec.step != 1:
        text += f" step {_show(spec.step)}"
    return text


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
