"""autotune side by side with the peers a user would pick: Ray Tune, and a hand-written Optuna study.

Three tools search the quickstart (studies/quickstart.yaml) with the same budget (its 10 trials), the same
workload objects (``autotune.workloads.mlp:build`` with the study's args), the same knob space (its
``search_space``), the same trial (warm-up 5, 50 steps) and the same throughput (samples/s over whole
wall-clock steps after the warm-up, data loading included, the slowest rank's time per window):

- ``autotune``: ``autotune run`` on a fresh copy of the study file (its defaults: GP sampler, the pruner
  against the best trial, the warm launcher, confirmation of the top 2);
- ``ray``: Ray Tune with OptunaSearch (TPE, seeded) and ASHA, each trial a Ray Train ``TorchTrainer`` with
  DDP on gloo and ``ScalingConfig(num_workers=world_size)``, written the way Ray's docs describe Tune over
  Train (a driver function per trial that runs ``trainer.fit()``, ``TuneReportCallback``), plus what it
  needs to finish here (``RAY_SETTINGS`` below);
- ``diy``: a plain Optuna study (TPE, seeded, no pruner) whose objective runs a cold ``torchrun`` of a
  training script per trial and reads its result file: what a user writes in an afternoon.

The peers' ranks run ``_peer_train.train``: a plain DDP loop over the workload, applying the knobs as
autotune does. Every tool starts with the default configuration (autotune's baseline; the peers get it as
their first point), so all three know the same starting point.

Rounds alternate the tools (autotune, ray, diy, then again), each tool in its own process and a fresh
folder (storage, results, Ray session) every round. Then ONE referee measures every tool's pick and the
default configuration: ``autotune trial studies/quickstart.yaml --set k=v --json``, ``--repeats`` times
each, interleaved. Reported per round and tool: the study's wall time (the command, start to exit), its
time outside training per trial (wall minus the trials' training spans, over the trials run), the
per-trial overhead and time to first step, pruned/stopped trials, the pick, the tool's own estimate of it
against the referee's median, and the referee's speed-up over the default.

Target: autotune's wall time at most a quarter of Ray Tune's, with a pick at least as good by the referee
(within the referee's noise: the larger (max - min) / median of the two picks' repeats), on every round.

    python benchmarks/peer_ray.py            # full: 2 rounds, 10 trials, 3 referee repeats, ~15 min on 2 cores
    python benchmarks/peer_ray.py --quick    # smoke run: 1 round, 3 trials of 15 steps, 1 repeat

Needs the ``peer`` extra (``pip install -e '.[peer]'``: Ray with its default, tune and train extras).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from _common import (
    HERE,
    REPO,
    RUNS,
    check,
    console,
    default_out,
    fmt,
    interleaved,
    knobs_label,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    ratio,
    spread,
    stage,
    warn_if_busy,
    write_json,
)

STUDY = REPO / "studies" / "quickstart.yaml"
PEER_TRAIN = HERE / "_peer_train.py"
TOOLS = ("autotune", "ray", "diy")
WALL_TARGET = 0.25  # autotune's wall time over Ray Tune's
METRIC = "throughput_samples_s"
SEED = 0

#: What Ray Tune over Ray Train needs to finish, and to measure what it trains, on this machine (each one
#: was found by running it without; the numbers are Ray 2.60's defaults).
RAY_SETTINGS: dict[str, str] = {
    "ray[default]": "installed (the peer extra): without the dashboard agent, the placement group of a trial "
                    "ASHA stops is never removed and the next trial waits for its CPUs forever",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.1": "Train V2's controller collects reports every 2 s and "
                    "ray.train.report() blocks until its one-slot queue is read: with a window every 5 steps "
                    "(~0.1-0.5 s) training would wait ~2 s a window",
    "DataLoader built with its own DistributedSampler": "ray.train.torch.prepare_data_loader() re-creates the "
                    "DataLoader without prefetch_factor (and persistent_workers), so the prefetch knob would do "
                    "nothing; the model still goes through ray.train.torch.prepare_model()",
    "tune.with_resources(driver, {'cpu': 0.01})": "the trial's driver function (which only calls "
                    "trainer.fit()) reserves 1 CPU by default, and a 2-rank trial then never gets its 2 workers' "
                    "CPUs on 2 cores; 0 is refused (an empty placement group), so a token 0.01",
    "ScalingConfig(resources_per_worker={'CPU': (cores - 0.01) / world_size})": "the ranks reserve the rest "
                    "of the cores, shared out: a 1-rank trial is not left with one core of two",
    "max_concurrent_trials=1": "trials run one at a time, as autotune's (on shared cores they would measure "
                    "each other)",
}
RAY_ENV = {"RAY_TRAIN_V2_ENABLED": "1", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1"}
DRIVER_CPU = 0.01


# ------------------------------------------------------------------------------------------------ the study
class _Loader(yaml.SafeLoader):
    """YAML where only true/false are booleans, as autotune reads study files (``amp: off`` stays "off")."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|false|False)$"), list("tTfF"))


def read_setup(study: Path, quick: bool, n_trials: int | None, max_steps: int | None) -> dict[str, Any]:
    """What every tool gets, from the study file: workload, knob space, trial length, budget, the default
    configuration. Plain JSON, handed to the tools' processes."""
    from autotune.search_space import study_space
    from autotune.workload_check import load_spec

    document = yaml.load(study.read_text(), Loader=_Loader)
    trial = document.get("trial", {})
    warmup = int(trial.get("warmup_steps", 3))
    steps = max_steps or (15 if quick else int(trial.get("max_steps", 40)))
    report_every = trial.get("report_every")
    window = int(report_every) if report_every else max(1, (steps - warmup) // 8)
    space = dict(document["search_space"])
    default_config = study_space(load_spec(study)).default_config()
    default = {name: getattr(default_config, name) for name in space}
    return {
        "study": str(study),
        "workload": {"entrypoint": document["workload"]["entrypoint"], "args": document["workload"].get("args", {})},
        "search_space": space,
        "warmup_steps": warmup,
        "max_steps": steps,
        "window": window,
        "n_trials": n_trials or (3 if quick else int(document.get("budget", {}).get("n_trials", 10))),
        "cores": len(os.sched_getaffinity(0)),
        "default": normalized(default, list(space)),
        "quick": quick,
    }


def normalized(knobs: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """A pick as the referee takes it: the knobs of ``order`` (the search space's), in its order, plain
    Python values, no prefetch_factor without DataLoader workers."""
    out = {k: (knobs[k].item() if hasattr(knobs[k], "item") else knobs[k])
           for k in order if knobs.get(k) is not None}
    if int(out.get("num_workers", 0) or 0) == 0:
        out.pop("prefetch_factor", None)
    return out


def suggest(trial: Any, space: Mapping[str, Any]) -> dict[str, Any]:
    """The study's search space, define-by-run (an Optuna trial, or Ray's OptunaSearch captor): the same
    ranges and choices, prefetch_factor only when num_workers > 0 (as autotune samples it). Returns the
    fixed knobs (a plain value in the space)."""
    fixed: dict[str, Any] = {}
    drawn: dict[str, Any] = {}
    for name, value in space.items():
        if name == "prefetch_factor":
            continue
        if not isinstance(value, Mapping):
            fixed[name] = value
        elif "choices" in value:
            drawn[name] = trial.suggest_categorical(name, list(value["choices"]))
        elif isinstance(value["low"], int) and isinstance(value["high"], int):
            drawn[name] = trial.suggest_int(name, value["low"], value["high"], log=bool(value.get("log", False)))
        else:
            drawn[name] = trial.suggest_float(name, value["low"], value["high"], log=bool(value.get("log", False)))
    prefetch = space.get("prefetch_factor")
    if prefetch is not None and int({**fixed, **drawn}.get("num_workers", 0)) > 0:
        if isinstance(prefetch, Mapping):
            trial.suggest_categorical("prefetch_factor", list(prefetch["choices"]))
        else:
            fixed["prefetch_factor"] = prefetch
    return fixed


def rank_config(setup: Mapping[str, Any], knobs: Mapping[str, Any], started_at: float) -> dict[str, Any]:
    """What ``_peer_train.train`` reads."""
    return {"knobs": dict(knobs), "workload": setup["workload"], "warmup_steps": setup["warmup_steps"],
            "max_steps": setup["max_steps"], "window": setup["window"], "started_at": started_at}


# ------------------------------------------------------------------------------------------------ processes
def run_group(cmd: Sequence[str], log: Path, timeout_s: float, env: Mapping[str, str] | None = None,
              errors: Path | None = None) -> tuple[int, float]:
    """Run ``cmd`` in its own session, output to ``log`` (stderr too, unless ``errors`` names a file for
    it); returns (exit status, wall seconds). Over the timeout: SIGTERM to its group, 10 s of grace, SIGKILL."""
    started = time.monotonic()
    with log.open("w") as out, (errors or Path(os.devnull)).open("w") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err if errors else subprocess.STDOUT,
                                start_new_session=True, env=dict(env) if env is not None else None, cwd=REPO)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
    return rc, time.monotonic() - started


def stray_processes(marker: str) -> list[int]:
    """Pids of the processes whose command line mentions ``marker`` (a Ray session's temp dir: gcs_server,
    raylet, the dashboard, the log monitor) and of all their descendants (dashboard heads, agents, workers)."""
    import psutil

    found: set[int] = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.add(proc.info["pid"])
                found.update(child.pid for child in proc.children(recursive=True))
    return sorted(found)


def end_strays(marker: str) -> list[int]:
    """End what a Ray session left running 10 s after its driver exited (it should leave nothing:
    ray.shutdown() runs in a finally); returns their pids."""
    import psutil

    deadline = time.monotonic() + 10  # after ray.shutdown() its processes take a moment to exit
    while (pids := stray_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            proc.terminate()
            procs.append(proc)
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return pids


def child_env() -> dict[str, str]:
    """The tools' processes: this folder importable (Ray's workers import _peer_train), Ray's settings."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    env.update(RAY_ENV)
    return env


# ------------------------------------------------------------------------------------------------ autotune
def run_autotune(setup: Mapping[str, Any], folder: Path, timeout_s: float) -> dict[str, Any]:
    """``autotune run`` on a fresh copy of the study file; the study's trials read back from its storage."""
    study = folder / "study.yaml"
    shutil.copyfile(setup["study"], study)
    autotune = Path(sys.executable).with_name("autotune")
    cmd = [str(autotune), "run", str(study), "--n-trials", str(setup["n_trials"]),
           "--set", f"trial.max_steps={setup['max_steps']}"]
    if setup["quick"]:
        cmd += ["--set", "confirm.top_k=1", "--set", "trial.max_seconds=180"]
    rc, wall = run_group(cmd, folder / "autotune.log", timeout_s, child_env())
    record: dict[str, Any] = {"tool": "autotune", "exit_status": rc, "wall_s": round(wall, 2)}
    record.update(read_autotune_study(folder, setup))
    return record


def read_autotune_study(folder: Path, setup: Mapping[str, Any]) -> dict[str, Any]:
    """Trials, pick and the tool's estimate of it from the study's storage (docs/storage.md's contract); the
    training span from each trial's result.json."""
    import optuna

    databases = sorted(folder.glob("*.db"))
    if not databases:
        return {"trials": [], "error": "no study database"}
    storage = f"sqlite:///{databases[0]}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    names = list(setup["search_space"])
    trials = []
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        span = _autotune_span(attrs)
        trials.append({
            "number": t.number, "role": attrs.get("role"), "outcome": attrs.get("outcome"),
            "config": normalized(attrs.get("config") or {}, names),
            "steps": attrs.get("steps"), METRIC: attrs.get(METRIC), "wall_s": attrs.get("wall_s"),
            "training_span_s": span, "time_to_first_step_s": attrs.get("time_to_first_step_s"),
        })
    confirmation = study.user_attrs.get("autotune_confirmation") or {}
    best_key = confirmation.get("best_config_key")
    best = next((g for g in confirmation.get("groups", []) if g.get("config_key") == best_key), None)
    return {
        "trials": trials,
        "pick": normalized(best["config"], names) if best else None,
        "estimate_samples_s": best.get("median") if best else None,
        "own_speedup": confirmation.get("speedup"),
    }


def _autotune_span(attrs: Mapping[str, Any]) -> float | None:
    """A trial's training span: result.json's, or for a trial stopped before its end (pruned: its ranks never
    wrote one) from its last window's time since launch less the time to its first step, as the peers' spans
    run to their last report."""
    trial_dir = Path(str(attrs.get("trial_dir")))
    with contextlib.suppress(OSError, ValueError, TypeError):
        span = json.loads((trial_dir / "result.json").read_text()).get("training_span_s")
        if span:
            return float(span)
    with contextlib.suppress(OSError, ValueError, TypeError, IndexError, KeyError):
        last = json.loads((trial_dir / "metrics.jsonl").read_text().splitlines()[-1])
        return max(0.0, float(last["elapsed_s"]) - float(attrs["time_to_first_step_s"]))
    return None


# ------------------------------------------------------------------------------------------------ ray tune
def ray_tool(setup: Mapping[str, Any], folder: Path, temp_dir: str) -> dict[str, Any]:
    """Ray Tune: OptunaSearch (TPE) + ASHA over TorchTrainer trials. Runs in its own process (--child ray)."""
    import optuna
    import ray
    import ray.train
    import ray.train.torch
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    space, cores = setup["search_space"], int(setup["cores"])

    def train_worker(config: dict[str, Any]) -> None:
        from _peer_train import train

        context = ray.train.get_context()
        train(config, context.get_world_rank(), context.get_world_size(), ray.train.torch.prepare_model,
              lambda record: ray.train.report(record))

    def driver(config: dict[str, Any]) -> None:
        started_at = time.time()
        world_size = int(config.get("world_size", 1))
        trainer = ray.train.torch.TorchTrainer(
            train_worker,
            train_loop_config=rank_config(setup, config, started_at),
            scaling_config=ray.train.ScalingConfig(num_workers=world_size, use_gpu=False,
                                                   resources_per_worker={"CPU": (cores - DRIVER_CPU) / world_size}),
            torch_config=ray.train.torch.TorchConfig(backend="gloo"),
            run_config=ray.train.RunConfig(name=f"train-{tune.get_context().get_trial_id()}",
                                           storage_path=str(folder / "ray_train"),
                                           callbacks=[TuneReportCallback()]),  # type: ignore[list-item, unused-ignore]
        )
        trainer.fit()

    class TrialTimes(tune.Callback):
        """Each trial's wall time as Tune's loop sees it: from its start to its end (complete, stopped, error)."""

        def __init__(self) -> None:
            self.started: dict[str, float] = {}
            self.ended: dict[str, float] = {}

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.started[trial.trial_id] = time.monotonic()

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.ended[trial.trial_id] = time.monotonic()

        on_trial_error = on_trial_complete

        def wall_s(self, trial_id: str | None) -> float | None:
            if trial_id in self.started and trial_id in self.ended:
                return round(self.ended[trial_id] - self.started[trial_id], 3)
            return None

    times = TrialTimes()
    timings: dict[str, float] = {}
    started = time.monotonic()
    ray.init(_temp_dir=temp_dir, runtime_env={"env_vars": dict(RAY_ENV)})
    try:
        timings["ray_init_s"] = time.monotonic() - started
        resources = ray.cluster_resources()
        searcher = OptunaSearch(space=functools.partial(suggest, space=space), metric=METRIC, mode="max",
                                sampler=optuna.samplers.TPESampler(seed=SEED), points_to_evaluate=[setup["default"]])
        scheduler = ASHAScheduler(time_attr="step", metric=METRIC, mode="max", max_t=setup["max_steps"],
                                  grace_period=setup["warmup_steps"] + setup["window"])
        tuner = tune.Tuner(
            tune.with_resources(driver, {"cpu": DRIVER_CPU}),
            tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=setup["n_trials"],
                                        max_concurrent_trials=1),
            run_config=tune.RunConfig(name="tune", storage_path=str(folder / "ray_results"), verbose=0,
                                      callbacks=[times]),
        )
        fit_started = time.monotonic()
        grid = tuner.fit()
        timings["fit_s"] = time.monotonic() - fit_started
        trials = []
        for index in range(len(grid)):
            result = grid[index]
            metrics = result.metrics or {}
            steps = metrics.get("step")
            status = ("error" if result.error else "complete" if steps == setup["max_steps"] else "stopped")
            trials.append({
                "outcome": status, "config": normalized(result.config or {}, list(space)), "steps": steps,
                METRIC: metrics.get(METRIC), "wall_s": times.wall_s(metrics.get("trial_id")),
                "training_span_s": metrics.get("training_span_s"),
                "time_to_first_step_s": metrics.get("time_to_first_step_s"),
                "error": str(result.error)[-500:] if result.error else None,
            })
        best = grid.get_best_result(metric=METRIC, mode="max", scope="last")
        return {"trials": trials, "pick": normalized(best.config or {}, list(space)),
                "estimate_samples_s": (best.metrics or {}).get(METRIC), "resources": dict(resources),
                "timings": timings}
    finally:
        shutdown_started = time.monotonic()
        ray.shutdown()
        timings["shutdown_s"] = time.monotonic() - shutdown_started


# ------------------------------------------------------------------------------------------------ diy optuna
def diy_tool(setup: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """A plain Optuna study (TPE, no pruner) whose objective runs a cold torchrun per trial. Runs in its own
    process (--child diy)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = setup["search_space"]
    trials: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        fixed = suggest(trial, space)
        knobs = normalized({**trial.params, **fixed}, list(space))
        trial_dir = folder / f"trial-{trial.number:03d}"
        trial_dir.mkdir(parents=True)
        config_path = trial_dir / "config.json"
        started_at = time.time()
        config_path.write_text(json.dumps(rank_config(setup, knobs, started_at)))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={int(knobs.get('world_size', 1))}", str(PEER_TRAIN), str(config_path)]
        rc, wall = run_group(cmd, trial_dir / "torchrun.log", 600)
        result_path = trial_dir / "result.json"
        result = json.loads(result_path.read_text()) if rc == 0 and result_path.exists() else {}
        trials.append({"outcome": "complete" if result else "crashed", "config": knobs, "steps": result.get("step"),
                       METRIC: result.get(METRIC), "wall_s": round(wall, 3),
                       "training_span_s": result.get("training_span_s"),
                       "time_to_first_step_s": result.get("time_to_first_step_s")})
        if not result:
            raise RuntimeError(f"torchrun exited {rc}; see {trial_dir / 'torchrun.log'}")
        return float(result[METRIC])

    study = optuna.create_study(study_name="diy", storage=f"sqlite:///{folder / 'diy.db'}", direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=SEED))
    study.enqueue_trial(setup["default"])
    study.optimize(objective, n_trials=setup["n_trials"], catch=(RuntimeError,))
    best = study.best_trial
    return {"trials": trials, "pick": normalized(best.params, list(space)), "estimate_samples_s": best.value}


def run_child_tool(tool: str, setup: Mapping[str, Any], folder: Path, timeout_s: float) -> dict[str, Any]:
    """Ray Tune or the do-it-yourself study in a process of its own (as a user runs their script)."""
    temp_dir = tempfile.mkdtemp(prefix="peer_ray-")  # Ray's session folder: short (socket paths), known
    setup_path = folder / "setup.json"
    setup_path.write_text(json.dumps(setup))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tool, "--setup", str(setup_path),
           "--dir", str(folder), "--ray-temp", temp_dir]
    try:
        rc, wall = run_group(cmd, folder / f"{tool}.log", timeout_s, child_env())
    finally:
        strays = end_strays(temp_dir)  # Ray's own processes run in sessions of their own
        shutil.rmtree(temp_dir, ignore_errors=True)
    record: dict[str, Any] = {"tool": tool, "exit_status": rc, "wall_s": round(wall, 2),
                              "stray_processes_ended": len(strays)}
    if strays:
        console.print(f"[yellow]  {tool}: ended {len(strays)} process(es) its Ray session left behind[/yellow]")
    result_path = folder / "result.json"
    if result_path.exists():
        record.update(json.loads(result_path.read_text()))
    else:
        record.update({"trials": [], "error": f"exit {rc}, no result; see {folder / f'{tool}.log'}"})
    return record


def child_main(tool: str, setup_path: Path, folder: Path, temp_dir: str) -> int:
    setup = json.loads(setup_path.read_text())
    result = ray_tool(setup, folder, temp_dir) if tool == "ray" else diy_tool(setup, folder)
    (folder / "result.json").write_text(json.dumps(result, default=str))
    return 0


# ------------------------------------------------------------------------------------------------ summary
def summarize_tool(record: dict[str, Any], setup: Mapping[str, Any]) -> dict[str, Any]:
    """Counts and time outside training for one tool's round."""
    trials = record.get("trials", [])
    search = [t for t in trials if t.get("role") != "confirm"]
    spans = [t["training_span_s"] for t in trials if t.get("training_span_s") is not None]
    per_trial = [t["wall_s"] - t["training_span_s"] for t in trials
                 if t.get("wall_s") is not None and t.get("training_span_s") is not None]
    first = [t["time_to_first_step_s"] for t in trials if t.get("time_to_first_step_s") is not None]
    stopped = [t for t in search if t.get("outcome") in ("pruned", "stopped")]
    failed = [t for t in search if t.get("outcome") not in ("pruned", "stopped", "complete")]
    wall = record["wall_s"]
    trained = sum(spans)
    return {
        "trials_run": len(trials),
        "search_trials": len(search),
        "confirm_trials": len(trials) - len(search),
        "stopped_or_pruned": len(stopped),
        "failed": len(failed),
        "training_s": round(trained, 2),
        "training_share": ratio(trained, wall),
        "outside_training_per_trial_s": ratio(wall - trained, len(trials)) if trials else None,
        "trial_overhead_median_s": median(per_trial),
        "time_to_first_step_median_s": median(first),
        "confirm_wall_s": round(sum(t.get("wall_s") or 0.0 for t in trials if t.get("role") == "confirm"), 2),
    }


def referee(setup: Mapping[str, Any], arms: dict[str, dict[str, Any]], repeats: int) -> dict[str, list[dict[str, Any]]]:
    """Every arm (a knob dict) measured by ``autotune trial`` on the study file, interleaved."""
    folder = RUNS / "peer_ray" / "referee"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    autotune = Path(sys.executable).with_name("autotune")
    labels = list(arms)
    count = iter(range(10_000))

    def run(label: str, repeat: int) -> dict[str, Any]:
        trial_dir = folder / f"{next(count):03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)[:60]}"
        cmd = [str(autotune), "trial", setup["study"], "--json", "--dir", str(trial_dir),
               "--set", f"trial.max_steps={setup['max_steps']}"]
        if setup["quick"]:
            cmd += ["--set", "trial.max_seconds=180"]
        for name, value in arms[label].items():
            cmd += ["--set", f"{name}={value}"]
        out = folder / f"{trial_dir.name}.json"
        rc, _ = run_group(cmd, out, 600, errors=folder / f"{trial_dir.name}.err")
        data: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            data = json.loads(out.read_text())
        value = data.get(METRIC)
        outcome = data.get("outcome", f"exit {rc}")
        console.print(f"  referee {label:48s} #{repeat + 1}: {outcome}, {fmt(value)} samples/s")
        return {"outcome": data.get("outcome"), METRIC: value, "wall_s": data.get("wall_s")}

    runs = interleaved(labels, repeats, run)
    return dict(zip(labels, runs, strict=True))


def label_of(knobs: Mapping[str, Any] | None) -> str:
    return knobs_label(knobs) if knobs else "-"


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, 3 trials of 15 steps, 1 repeat")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/peer_ray.json)")
    parser.add_argument("--study", type=Path, default=STUDY, help="the study file every tool searches")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 2; quick 1)")
    parser.add_argument("--trials", type=int, help="trial budget of every tool (default: the study's)")
    parser.add_argument("--steps", type=int, help="steps per trial (default: the study's; quick 15)")
    parser.add_argument("--repeats", type=int,
                        help="referee repeats per configuration (default 3; quick 1; 0: no referee)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="which tools, comma-separated")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per tool and round before it is ended")
    parser.add_argument("--child", choices=("ray", "diy"), help=argparse.SUPPRESS)
    parser.add_argument("--setup", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ray-temp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args.child, args.setup, args.dir, args.ray_temp)

    started = time.monotonic()
    machine = {**machine_facts(), "ray": _version("ray")}
    warn_if_busy(machine)
    tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        parser.error(f"--tools: unknown {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
    if "ray" in tools and machine["ray"] is None:
        parser.error("Ray is not installed: pip install -e '.[peer]'")
    rounds = args.rounds or (1 if args.quick else 2)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    setup = read_setup(args.study.resolve(), args.quick, args.trials, args.steps)
    console.print(f"{len(tools)} tools x {rounds} round(s), {setup['n_trials']} trials of {setup['max_steps']} steps "
                  f"(warm-up {setup['warmup_steps']}, a window every {setup['window']}), study {setup['study']}")

    records: list[dict[str, Any]] = []
    for round_number in range(1, rounds + 1):
        for tool in tools:
            folder = RUNS / "peer_ray" / f"round-{round_number}" / tool
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            with stage(f"round {round_number}: {tool}"):
                if tool == "autotune":
                    record = run_autotune(setup, folder, args.timeout)
                else:
                    record = run_child_tool(tool, setup, folder, args.timeout)
            record["round"] = round_number
            record["summary"] = summarize_tool(record, setup)
            records.append(record)
            console.print(f"  wall {record['wall_s']:.1f} s, {record['summary']['trials_run']} trials, pick "
                          f"{label_of(record.get('pick'))} at {fmt(record.get('estimate_samples_s'))} samples/s"
                          + (f"; {record['error']}" if record.get("error") else ""))

    def arm(knobs: Mapping[str, Any]) -> str:
        return "default" if dict(knobs) == setup["default"] else label_of(knobs)

    arms: dict[str, dict[str, Any]] = {"default": setup["default"]}
    for record in records:
        if record.get("pick"):
            arms.setdefault(arm(record["pick"]), record["pick"])
    measured: dict[str, list[dict[str, Any]]] = {}
    if repeats > 0:
        with stage(f"referee: {len(arms)} configurations x {repeats}, interleaved (autotune trial)"):
            measured = referee(setup, arms, repeats)

    def referee_median(knobs: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
        values = [r[METRIC] for r in measured.get(arm(knobs), []) if r.get(METRIC) is not None] if knobs else []
        return median(values), spread(values)

    default_median, _ = referee_median(setup["default"])
    for record in records:
        value, noise = referee_median(record.get("pick"))
        record["referee"] = {"median_samples_s": value, "spread": noise,
                             "estimate_over_referee": ratio(record.get("estimate_samples_s"), value),
                             "speedup_over_default": ratio(value, default_median)}

    targets: list[dict[str, Any]] = []
    for round_number in range(1, rounds + 1):
        by_tool = {r["tool"]: r for r in records if r["round"] == round_number}
        auto, peer = by_tool.get("autotune"), by_tool.get("ray")
        if not auto or not peer:
            continue
        wall_ratio = ratio(auto["wall_s"], peer["wall_s"])
        a, r = auto["referee"], peer["referee"]
        noise = max(a["spread"] or 0.0, r["spread"] or 0.0)
        pick_ok = (None if a["median_samples_s"] is None or r["median_samples_s"] is None
                   else a["median_samples_s"] >= r["median_samples_s"] * (1 - noise))
        met = None if wall_ratio is None or pick_ok is None else (wall_ratio <= WALL_TARGET and pick_ok)
        search_ratio = ratio(auto["wall_s"] - auto["summary"]["confirm_wall_s"], peer["wall_s"])
        targets.append({"round": round_number, "wall_ratio": wall_ratio, "search_only_wall_ratio": search_ratio,
                        "pick_ratio":
                        ratio(a["median_samples_s"], r["median_samples_s"]), "noise": noise,
                        "wall_met": None if wall_ratio is None else wall_ratio <= WALL_TARGET,
                        "pick_met": pick_ok, "met": met})
    all_met = bool(targets) and all(t["met"] for t in targets) and len(targets) == rounds

    print_table(
        f"Search: {setup['n_trials']} trials of {setup['max_steps']} steps per tool, rounds alternating",
        ["round", "tool", "wall s", "of which confirmation s", "trials (+confirm)", "stopped / pruned", "failed",
         "training s", "in training", "outside training / trial s", "trial overhead s", "first step s"],
        [[r["round"], r["tool"], r["wall_s"], r["summary"]["confirm_wall_s"] or None,
          f"{r['summary']['search_trials']} (+{r['summary']['confirm_trials']})", r["summary"]["stopped_or_pruned"],
          r["summary"]["failed"], r["summary"]["training_s"], pct(r["summary"]["training_share"]),
          r["summary"]["outside_training_per_trial_s"], r["summary"]["trial_overhead_median_s"],
          r["summary"]["time_to_first_step_median_s"]] for r in records],
        caption=machine_caption(machine),
    )
    print_table(
        "Picks: each tool's own estimate against the referee's median",
        ["round", "tool", "pick", "own estimate samples/s", "referee samples/s", "own / referee",
         "speed-up over default (referee)"],
        [[r["round"], r["tool"], label_of(r.get("pick")), r.get("estimate_samples_s"), r["referee"]["median_samples_s"],
          r["referee"]["estimate_over_referee"], r["referee"]["speedup_over_default"]] for r in records],
    )
    print_table(
        f"Referee: autotune trial, {repeats} interleaved repeat(s) per configuration",
        ["configuration", "samples/s", "median", "spread", "over default"],
        [[label, ", ".join(fmt(v.get(METRIC)) for v in values),
          median([v[METRIC] for v in values if v.get(METRIC) is not None]),
          pct(spread([v[METRIC] for v in values if v.get(METRIC) is not None])),
          ratio(median([v[METRIC] for v in values if v.get(METRIC) is not None]), default_median)]
         for label, values in measured.items()],
    )
    print_table(
        f"Target: autotune's wall time <= {WALL_TARGET:.0%} of Ray Tune's, a pick at least as good by the referee "
        "(within its noise), every round",
        ["round", "autotune / ray wall", "wall", "(without autotune's confirmation)", "autotune / ray pick (referee)",
         "noise", "pick", "round"],
        [[t["round"], t["wall_ratio"], check(t["wall_met"]), t["search_only_wall_ratio"], t["pick_ratio"],
          pct(t["noise"]), check(t["pick_met"]), check(t["met"])] for t in targets],
        caption=f"overall: {check(all_met if targets else None)} (the wall time compared includes autotune's "
                "confirmation runs)",
    )
    write_json(
        args.out or default_out("peer_ray", args.quick), "peer_ray",
        {"study": setup["study"], "rounds": rounds, "tools": tools, "repeats": repeats, "setup": setup,
         "ray_settings": RAY_SETTINGS, "ray_env": RAY_ENV, "wall_target": WALL_TARGET},
        {"records": records, "referee": measured, "default_samples_s": default_median, "targets": targets,
         "target_met": all_met if targets else None},
        machine, started,
    )
    return 0


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
