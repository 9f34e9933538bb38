"""The Optuna side of a study: storage, sampler and pruner built from the study file."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage

from autotune._gp import PartialGPSampler
from autotune.errors import AutotuneError, UsageError
from autotune.objectives import NoiseAwarePruner
from autotune.search_space import SearchSpace
from autotune.spec import StudySpec, _redact
from autotune.version import __version__

HEARTBEAT_INTERVAL_S = 5
GRACE_PERIOD_S = 30
LOCK_TIMEOUT_S = 120.0
SCHEMA_LOCK = "autotune-schema"  # creating tables and studies: one process at a time per database


def make_storage(url: str) -> BaseStorage:
    """An RDB storage with heartbeats, so a trial whose tuner died is failed and retried by the next one."""
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several tuners on one machine share the file: wait for the lock instead of failing at once.
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
    try:
        with _quiet():
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2),
            )
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AutotuneError(f"cannot open storage {_redact(url)}: {first}") from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hide Optuna's notices about experimental features autotune deliberately uses (heartbeats, group)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def make_sampler(spec: StudySpec, space: SearchSpace) -> BaseSampler:
    """The sampler named in the study file, seeded."""
    with _quiet():
        return _make_sampler(spec, space)


def _make_sampler(spec: StudySpec, space: SearchSpace) -> BaseSampler:
    cfg = spec.sampler
    seed = cfg.seed
    n_trials = spec.budget.n_trials or 20  # for the start-up heuristic only; a null budget runs without a limit
    startup = cfg.n_startup_trials if cfg.n_startup_trials is not None else max(3, min(10, n_trials // 4))
    name = cfg.name
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=startup, multivariate=True, group=True, constant_liar=True
        )
    if name == "gp":
        if len(spec.objectives) == 1:
            return PartialGPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, n_trials // 3)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
    if name == "grid":
        return _GridSampler(grid_points(space), seed=seed)
    raise UsageError(f"sampler {name!r} is not supported")


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, less the ``study.stop()`` it calls once the grid is covered: that works only
    inside ``Study.optimize`` and raised RuntimeError from the last grid trial's tell, ending the run.
    autotune's loop stops at its budget; trials past the grid repeat a grid point."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def grid_points(space: SearchSpace) -> dict[str, list[Any]]:
    """Every value of every searched knob; a log range contributes its powers of two (and its ends)."""
    grid: dict[str, list[Any]] = {}
    for name, dist in space.distributions().items():
        if isinstance(dist, CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution):
            if dist.log:
                values = {dist.low, dist.high}
                power = 1
                while power <= dist.high:
                    if power >= dist.low:
                        values.add(power)
                    power *= 2
                grid[name] = sorted(values)
            else:
                grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution):  # a float hyperparameter (hp.<name>)
            grid[name] = float_grid(dist)
    return grid


def float_grid(dist: FloatDistribution, points: int = 5) -> list[float]:
    """Grid values of a float range: every step when it has a step, else ``points`` values evenly spaced
    (geometrically on a log range), ends included."""
    if dist.step:
        count = round((dist.high - dist.low) / dist.step) + 1
        return [dist.low + i * dist.step for i in range(count)]
    if dist.low == dist.high:
        return [dist.low]
    if dist.log:
        ratio = (dist.high / dist.low) ** (1 / (points - 1))
        return [dist.low * ratio**i for i in range(points - 1)] + [dist.high]
    width = (dist.high - dist.low) / (points - 1)
    return [dist.low + i * width for i in range(points - 1)] + [dist.high]


def make_pruner(spec: StudySpec) -> BasePruner:
    """Optuna's pruner for single-objective studies (multi-objective ones use autotune's own rule)."""
    cfg = spec.pruner
    if len(spec.objectives) > 1 or cfg.name == "none":
        return optuna.pruners.NopPruner()
    first_window = spec.trial.warmup_steps + spec.trial.window()
    if cfg.name == "best":
        # Only the best configuration matters: a trial clearly worse than the best finished one (by more than
        # the noise margin) cannot become it, so it stops at its first measured window. The baseline, run
        # first and never pruned, is the first trial to compare with.
        return NoiseAwarePruner(
            0.0,
            n_startup_trials=cfg.startup_trials(),
            n_warmup_steps=spec.trial.warmup_steps,
            margin=cfg.margin,
        )
    if cfg.name in ("median", "percentile"):
        # Against the median, a trial as good as most is pruned on noise: judge from the second measured
        # window on (the first is the noisiest: workers starting, caches cold), and only when clearly worse.
        return NoiseAwarePruner(
            50.0 if cfg.name == "median" else cfg.percentile,
            n_startup_trials=cfg.startup_trials(),
            n_warmup_steps=first_window,
            margin=cfg.margin,
        )
    if cfg.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=first_window + 1,
            max_resource=spec.trial.max_steps,
            reduction_factor=3,
        )
    if cfg.name == "successive_halving":
        halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=first_window + 1, reduction_factor=3)
        return FeasibleReferences(halving)
    raise UsageError(f"pruner {cfg.name!r} is not supported")


class FeasibleReferences(BasePruner):
    """An Optuna pruner that sees, among the finished trials, only the feasible ones that ran to their end
    (:func:`autotune.objectives.is_reference`): an oom or diverged trial, told COMPLETE with its partial
    values, is never the trial others are measured against. (Hyperband's brackets read the storage
    directly, so it cannot be wrapped this way.)"""

    def __init__(self, pruner: BasePruner) -> None:
        self.pruner = pruner

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.pruner.prune(_ReferencesOnly(study), trial)  # type: ignore[arg-type]


class _ReferencesOnly:
    """A study whose COMPLETE trials are its references only (everything else is the study's own)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[optuna.trial.FrozenTrial]:
        from autotune.objectives import is_reference

        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if t.state != optuna.trial.TrialState.COMPLETE or is_reference(t)]


def open_study(
    spec: StudySpec,
    space: SearchSpace,
    storage_url: str | None = None,
    *,
    create: bool = True,
) -> optuna.Study:
    """Create the study (once) or load it, with the sampler and pruner of the study file."""
    optuna.logging.set_verbosity(logging.WARNING)
    url = storage_url or spec.storage_url()
    missing = UsageError(f"no study named {spec.name!r} in {_redact(url)}; run `autotune run {spec.source}` first")
    if not create and _missing_sqlite_file(url):
        raise missing  # opening it would create an empty database file
    if not create:
        return _open_study(spec, space, url, create=False, missing=missing)
    # Workers started together on an empty database would race to create the tables and the study
    # (UniqueViolation on PostgreSQL): one creates while the others wait, then load.
    with study_lock(url, SCHEMA_LOCK):
        return _open_study(spec, space, url, create=True, missing=missing)


def _open_study(spec: StudySpec, space: SearchSpace, url: str, *, create: bool, missing: Exception) -> optuna.Study:
    storage = make_storage(url)
    directions = [o.direction or "maximize" for o in spec.objectives]
    names = [s.study_name for s in storage.get_all_studies()]
    if spec.name not in names and not create:
        raise missing
    with contextlib.suppress(optuna.exceptions.DuplicatedStudyError):
        if spec.name not in names:
            study = optuna.create_study(
                storage=storage, study_name=spec.name, directions=directions,
                sampler=make_sampler(spec, space), pruner=make_pruner(spec),
            )
            with _quiet():
                study.set_metric_names([o.key for o in spec.objectives])
            study.set_user_attr(
                "autotune",
                {
                    "version": __version__,
                    # the study file as run, less the storage password (dashboards show study attributes)
                    "spec": {**spec.model_dump(mode="json"), "storage": spec.storage and _redact(spec.storage)},
                    "device": space.device,
                    "machine": machine_facts(),
                },
            )
            return study
    study = optuna.load_study(
        study_name=spec.name, storage=storage, sampler=make_sampler(spec, space), pruner=make_pruner(spec)
    )
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise UsageError(
            f"{spec.source}: objectives: the stored study {spec.name!r} was created with directions {stored}, "
            f"the file now asks for {directions}; rename the study or restore its objectives"
        )
    return study


def read_study(spec: StudySpec, storage_url: str | None = None) -> optuna.Study:
    """The stored study, to read it (``autotune best``/``status``, ``load_calibration``): neither the
    workload nor the search space is loaded, so a finished study reads even where its workload cannot be
    imported. UsageError when the study (or its SQLite file) does not exist."""
    optuna.logging.set_verbosity(logging.WARNING)
    url = storage_url or spec.storage_url()
    missing = UsageError(f"no study named {spec.name!r} in {_redact(url)}; run `autotune run {spec.source}` first")
    if _missing_sqlite_file(url):
        raise missing
    storage = make_storage(url)
    if spec.name not in [s.study_name for s in storage.get_all_studies()]:
        raise missing
    return optuna.load_study(study_name=spec.name, storage=storage, sampler=optuna.samplers.RandomSampler())


@contextlib.contextmanager
def study_lock(url: str, name: str, *, wait: bool = True, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
    """A mutex shared by every autotune process on the database ``url``, one per ``name``.

    PostgreSQL: a session advisory lock (``pg_try_advisory_lock``); MySQL: ``GET_LOCK``; SQLite (one
    machine): ``flock`` on a file under the temp folder. The database or the kernel drops the lock when
    its holder dies. Yields True once held; with ``wait=False`` it yields False at once when another
    process holds it. Waiting longer than ``timeout_s`` is an AutotuneError.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    backend = parsed.get_backend_name()
    key = hashlib.sha256(f"autotune:{name}".encode()).digest()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            yield True  # one process only
            return
        folder = Path(tempfile.gettempdir()) / "autotune-locks"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (hashlib.sha256(os.path.abspath(parsed.database).encode() + key).hexdigest()[:32] + ".lock")
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            held = _poll(lambda: _flock(fd), url, name, wait, timeout_s)
            yield held
        finally:
            os.close(fd)
        return
    if backend not in ("postgresql", "mysql"):
        yield True
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    if backend == "postgresql":
        number = int.from_bytes(key[:8], "big", signed=True)
        take = text("SELECT pg_try_advisory_lock(:k)").bindparams(k=number)
        give = text("SELECT pg_advisory_unlock(:k)").bindparams(k=number)
    else:
        label = "autotune:" + key.hex()[:40]
        take = text("SELECT GET_LOCK(:k, 0)").bindparams(k=label)
        give = text("SELECT RELEASE_LOCK(:k)").bindparams(k=label)
    engine = create_engine(url, poolclass=NullPool)
    try:
        try:
            conn = engine.connect()
        except Exception as e:
            raise AutotuneError(f"cannot open storage {_redact(url)}: {_first_line(e)}") from None
        with conn:
            held = _poll(lambda: bool(conn.execute(take).scalar()), url, name, wait, timeout_s)
            conn.commit()
            try:
                yield held
            finally:
                if held:
                    with contextlib.suppress(Exception):
                        conn.execute(give)
                        conn.commit()
    finally:
        engine.dispose()


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _poll(take: Callable[[], bool], url: str, name: str, wait: bool, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not take():
        if not wait:
            return False
        if time.monotonic() > deadline:
            raise AutotuneError(
                f"another autotune process has held the lock {name!r} on {_redact(url)} for over "
                f"{timeout_s:g} s; is one stuck?"
            )
        time.sleep(0.05)
    return True


def _missing_sqlite_file(url: str) -> bool:
    from sqlalchemy.engine import make_url

    with contextlib.suppress(Exception):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
            return not os.path.exists(parsed.database)
    return False


def machine_facts() -> dict[str, Any]:
    """Where the study is measured, for reports that travel: host, cores, CPU model, memory, versions."""
    import platform

    import psutil

    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    facts: dict[str, Any] = {
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": model or platform.processor(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "optuna": optuna.__version__,
    }
    with contextlib.suppress(ImportError):
        import torch

        facts["torch"] = torch.__version__
        if torch.cuda.is_available():
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return facts


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values())
