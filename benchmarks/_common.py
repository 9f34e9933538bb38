"""Shared helpers of the benchmarks: machine facts, JSON output, tables, trials, interleaved repeats.

Every benchmark script imports this module (``python benchmarks/<name>.py`` puts this folder first on
``sys.path``). Nothing here measures anything by itself.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TypeVar

from rich.console import Console
from rich.table import Table

from autotune.trial_runner import Launcher, RunHandle, TrialPlan

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = HERE / "runs"  # trial folders, study databases and --quick outputs (ignored by git)

T = TypeVar("T")
R = TypeVar("R")
LauncherKind = Literal["warm", "torchrun"]

# Tables are wide: when the output is a file or a pipe, do not squeeze them into 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


# ------------------------------------------------------------------------------------------------ machine
def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


#: The CPU flags a figure can turn on: bf16 autocast is fast with avx512_bf16 (or AMX) and 10-33x slower than
#: fp32 without it, so the quickstart's best configuration differs between such machines.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def _cpu_flags() -> list[str]:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [flag for flag in CPU_FLAGS if flag in present]
    return []


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_facts() -> dict[str, Any]:
    """What the numbers were measured on: cores, CPU model, RAM, versions and how busy the machine was."""
    import psutil

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "torch": _version("torch"),
        "optuna": _version("optuna"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }


# ------------------------------------------------------------------------------------------------- output
def default_out(name: str, quick: bool) -> Path:
    """``benchmarks/<name>.json`` for a full run; quick (smoke) runs go to ``benchmarks/runs/`` so they never
    overwrite recorded results."""
    return RUNS / f"{name}.quick.json" if quick else HERE / f"{name}.json"


def write_json(path: Path, benchmark: str, settings: Mapping[str, Any], results: Any, machine: Mapping[str, Any],
               started: float) -> None:
    """Write one benchmark's record: what ran, where, when, how long, and its numbers."""
    record = {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - started, 1),
        "machine": {**machine, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "settings": dict(settings),
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    tmp.replace(path)
    console.print(f"wrote {path}")


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None = None) -> None:
    """A rich table; numbers right-aligned, None shown as a dash."""
    table = Table(title=title, caption=caption, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(fmt(v) for v in row))
    console.print(table)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isinf(value):
            return "never"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def check(met: bool | None) -> str:
    return "-" if met is None else ("MET" if met else "MISSED")


def machine_caption(machine: Mapping[str, Any]) -> str:
    flags = " ".join(machine.get("cpu_flags") or []) or "flags not recorded"
    return (
        f"{machine['nproc']} cores ({machine['cpu_model']}; {flags}), "
        f"{machine['ram_gb']} GB RAM, torch {machine['torch']}, "
        f"load average at start {machine['load_avg_1m_at_start']}"
    )


def warn_if_busy(machine: Mapping[str, Any]) -> None:
    load = float(machine["load_avg_1m_at_start"])
    if load > 0.5 * int(machine["nproc"]):
        console.print(
            f"[yellow]warning: load average {load:.1f} on {machine['nproc']} cores: something else is running; "
            "timings will be disturbed[/yellow]"
        )


# ------------------------------------------------------------------------------------------------ statistics
def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample standard deviation over the mean)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 and statistics.mean(values) else None


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median: the relative range of repeated measurements."""
    if not values:
        return None
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else None


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's correlation of the ranks (ties averaged)."""
    if len(x) != len(y) or len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else None


# ------------------------------------------------------------------------------------------------ running
def interleaved(arms: Sequence[T], repeats: int, run: Callable[[T, int], R]) -> list[list[R]]:
    """Run every arm ``repeats`` times, round-robin, so a machine that drifts (heat, a neighbour) hits every
    arm alike. The order within a round rotates, so no arm always goes first. Returns the results per arm."""
    results: list[list[R]] = [[] for _ in arms]
    for repeat in range(repeats):
        shift = repeat % len(arms) if arms else 0
        for index in [*range(shift, len(arms)), *range(shift)]:
            results[index].append(run(arms[index], repeat))
    return results


@dataclass(frozen=True)
class WorkloadRef:
    """A workload as a study file names it."""

    entrypoint: str
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.entrypoint.rsplit(".", 1)[-1].split(":")[0]


#: The real third-party model's study file (issue 16): fidelity.py and trial_scatter.py measure its trials.
HF_STUDY = REPO / "studies" / "hf_gpt2.yaml"
#: The --quick runs' GPT-2: the same GPT2LMHeadModel, entrypoint and data, 1 layer of width 64 on 32-byte windows
#: (68,544 parameters against the study file's 437,760: a step at batch 16-32 is 6-8x less work). What is left
#: of a smoke run's trial is mostly its start (a rank imports transformers' GPT-2: ~1.3 s).
HF_QUICK_ARGS: dict[str, Any] = {"n_layer": 1, "n_embd": 64, "n_head": 2, "seq_len": 32}


def hf_study(quick: bool = False) -> tuple[WorkloadRef, dict[str, Any]]:
    """studies/hf_gpt2.yaml's workload and its ``trial:`` section (the defaults filled in); ``quick``: the workload
    at HF_QUICK_ARGS' smaller size."""
    from autotune.spec import read_spec

    spec = read_spec(str(HF_STUDY))
    args = {**spec.workload.args, **(HF_QUICK_ARGS if quick else {})}
    workload = WorkloadRef(str(HF_STUDY.parent / spec.workload.entrypoint), args)
    return workload, spec.trial.model_dump(exclude_none=True)


#: The quickstart's MLP (studies/quickstart.yaml): the workload most benchmarks use.
MLP = WorkloadRef("autotune.workloads.mlp:build", {"hidden": 256, "depth": 4, "transform_cost": 16})
CONVNET = WorkloadRef("autotune.workloads.convnet:build")
LM = WorkloadRef("autotune.workloads.lm:build")
WORKLOADS = {"mlp": MLP, "convnet": CONVNET, "lm": LM}

#: The MLP landscape grid: 5 x 3 x 2 x 2 = 60 configurations; the quick grid has 12.
MLP_GRID: dict[str, list[Any]] = {
    "batch_size": [16, 32, 64, 128, 256],
    "num_workers": [0, 1, 2],
    "amp": ["off", "bf16"],
    "world_size": [1, 2],
}
MLP_GRID_QUICK: dict[str, list[Any]] = {
    "batch_size": [16, 64, 256],
    "num_workers": [0, 1],
    "amp": ["off"],
    "world_size": [1, 2],
}


def grid_configs(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, as knob dicts, in a fixed order."""
    names = list(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(grid[n] for n in names))]


def space_of_grid(grid: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """The study-file ``search_space`` whose grid is exactly ``grid``: a contiguous run of integers is a
    ``{low, high}`` range (as a user writes num_workers), anything else a list of choices (a batch-size
    range would be sampled at values the grid never measured)."""
    space: dict[str, Any] = {}
    for name, values in grid.items():
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        if ints and len(values) > 1 and list(values) == list(range(min(values), max(values) + 1)):
            space[name] = {"low": min(values), "high": max(values)}
        elif len(values) == 1:
            space[name] = values[0]
        else:
            space[name] = {"choices": list(values)}
    return space


def study_document(
    name: str,
    workload: WorkloadRef,
    search_space: Mapping[str, Any],
    trial: Mapping[str, Any],
    *,
    sampler: Mapping[str, Any] | None = None,
    pruner: Mapping[str, Any] | None = None,
    n_trials: int = 15,
    confirm: Mapping[str, Any] | None = None,
    storage: str | None = None,
    start: LauncherKind = "warm",
) -> dict[str, Any]:
    """A study file (as a dict) for ``workload``; the same keys a user writes in YAML."""
    document: dict[str, Any] = {
        "name": name,
        "workload": {"entrypoint": workload.entrypoint, "args": dict(workload.args)},
        "launcher": {"kind": "local", "device": "cpu", "start": start},
        "search_space": dict(search_space),
        "trial": dict(trial),
        "objectives": [{"metric": "throughput", "direction": "maximize"}],
        # Unless a benchmark says otherwise: autotune's defaults (the sampler seeded, for reproducibility).
        "sampler": dict(sampler or {"seed": 0}),
        "pruner": dict(pruner or {}),
        "budget": {"n_trials": n_trials},
        "confirm": dict(confirm or {"top_k": 2, "repeats": 1}),
    }
    if storage is not None:
        document["storage"] = storage
    return document


def make_spec(document: Mapping[str, Any], base_dir: Path = RUNS) -> Any:
    """Validate a study document into a StudySpec whose relative paths (runs/, the database) live in
    ``base_dir``."""
    from autotune.spec import parse_spec
    from autotune.workload_check import check_workload_fits

    base_dir.mkdir(parents=True, exist_ok=True)
    spec = parse_spec(dict(document), source=f"<benchmark {document['name']}>", base_dir=base_dir)
    check_workload_fits(spec)
    return spec


def fresh_study_file(document: Mapping[str, Any], folder: Path) -> Path:
    """Write ``document`` as study.yaml into an emptied ``folder`` (no database left from an earlier run)."""
    import shutil

    import yaml

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


class Trials:
    """Runs single real trials of one workload, with the warm (default) or the cold torchrun launcher.

    One launcher of each kind serves every trial, as in a study; ``close()`` (or ``with``) releases them.
    Trial folders go to ``runs_dir/<n>-<tag>``.
    """

    def __init__(self, workload: WorkloadRef, runs_dir: Path) -> None:
        from autotune.workload import load_workload

        self.workload = workload
        self.runs_dir = runs_dir
        loaded = load_workload(workload.entrypoint, dict(workload.args), REPO)
        self.base_lr: float = loaded.base_lr
        self.base_batch_size: int = loaded.base_batch_size
        self._launchers: dict[str, Any] = {}
        self._count = itertools.count()
        runs_dir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Trials:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def launcher(self, kind: LauncherKind) -> Any:
        if kind not in self._launchers:
            from autotune.trial_runner import LocalLauncher, WarmLauncher

            self._launchers[kind] = TimedLauncher(WarmLauncher() if kind == "warm" else LocalLauncher())
        return self._launchers[kind]

    def last_launch_s(self, kind: LauncherKind) -> float | None:
        """How long the last ``launch()`` call of this kind took (zygote start, core lease wait, fork/exec)."""
        launcher = self._launchers.get(kind)
        return None if launcher is None else launcher.last_launch_s

    def config(self, knobs: Mapping[str, Any]) -> Any:
        """A TrialConfig of this workload: the given knobs, the others at their defaults (the default
        configuration: base batch, one rank, no workers, fp32, no checkpointing, 25 MB buckets)."""
        from autotune.search_space import TrialConfig

        values = {"batch_size": self.base_batch_size, **dict(knobs)}
        return TrialConfig.create(base_lr=self.base_lr, base_batch_size=self.base_batch_size, **values)

    def run(self, config: Any, limits: Mapping[str, Any], kind: LauncherKind = "warm", tag: str = "trial",
            plan_fields: Mapping[str, Any] | None = None) -> Any:
        """One real trial of ``config`` (a TrialConfig) to its end; returns its TrialResult. ``plan_fields``: more
        fields of its TrialPlan (``step_anatomy``: False)."""
        from autotune.spec import TrialLimits
        from autotune.trial_runner import TrialPlan, run_trial

        plan = TrialPlan(
            config=config,
            entrypoint=self.workload.entrypoint,
            args=dict(self.workload.args),
            base_dir=str(REPO),
            limits=TrialLimits(**dict(limits)),
            **dict(plan_fields or {}),
        )
        trial_dir = self.runs_dir / f"{next(self._count):03d}-{tag}"
        if trial_dir.exists():
            import shutil

            shutil.rmtree(trial_dir)
        return run_trial(plan, trial_dir, self.launcher(kind))

    def close(self) -> None:
        for launcher in self._launchers.values():
            launcher.close()
        self._launchers.clear()


class TimedLauncher(Launcher):
    """A launcher that remembers how long its last ``launch()`` call took; everything else is the inner one's."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.name = inner.name
        self.last_launch_s: float | None = None

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        started = time.monotonic()
        try:
            return self.inner.launch(plan, trial_dir)
        finally:
            self.last_launch_s = time.monotonic() - started

    def close(self) -> None:
        self.inner.close()


def knobs_label(knobs: Mapping[str, Any]) -> str:
    short = {"batch_size": "bs", "num_workers": "workers", "world_size": "ws", "activation_checkpointing": "ckpt",
             "bucket_cap_mb": "bucket", "prefetch_factor": "prefetch", "grad_accum": "accum"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in knobs.items())


def config_knobs(config: Any, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(config, name) for name in names}


def quiet_optuna() -> None:
    """Optuna's per-trial log lines and experimental-feature notices would bury the tables."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def seeded_shuffle(items: Sequence[T], seed: int) -> list[T]:
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


@contextlib.contextmanager
def stage(message: str) -> Iterator[None]:
    started = time.monotonic()
    console.print(f"[bold]{message}[/bold]")
    yield
    console.print(f"  done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    # `python benchmarks/_common.py`: this machine, as benchmarks/README.md records it.
    facts = machine_facts()
    print(
        f"{datetime.date.today().isoformat()}: {facts['nproc']} cores (`nproc`), {facts['cpu_model']} "
        f"({' '.join(facts['cpu_flags']) or 'none of ' + ', '.join(CPU_FLAGS)}), "
        f"{facts['ram_gb']} GB RAM, torch {facts['torch']}, optuna {facts['optuna']}, Python {facts['python']}, "
        f"load average {facts['load_avg_1m_at_start']}"
    )
