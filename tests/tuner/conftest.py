"""Helpers for the tuning-loop tests: a study folder with the faulty workload, the real CLI, the stored study."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tests._cli import autotune as in_process
from tests._processes import wait_no_leftovers, wait_none_in
from tests.trial_runner.conftest import HERE as TRIAL_RUNNER_TESTS

#: Short real trials: a couple of seconds each, most of it torchrun start-up.
SHORT_TRIAL = {"warmup_steps": 2, "max_steps": 14, "report_every": 3, "max_seconds": 30, "hang_seconds": 5}

#: The user attributes docs/storage.md promises on every finished trial.
TRIAL_ATTRS = {
    "role", "config", "config_key", "outcome", "reason", "throughput_samples_s", "peak_memory_mb", "loss",
    "time_to_first_step_s", "wall_s", "training_s", "steps", "samples", "windows", "trial_dir", "error_lines",
    "worker", "threads_per_rank", "compile_s", "machine_load", "busy", "gpu_other_processes",
}
KNOBS = {
    "batch_size", "grad_accum", "lr_scaling", "num_workers", "prefetch_factor", "pin_memory", "amp",
    "activation_checkpointing", "bucket_cap_mb", "world_size",
    "threads_per_rank", "compile", "sharding", "gradient_as_bucket_view", "static_graph",
    "tensor_parallel", "pipeline_parallel", "pipeline_schedule", "pipeline_microbatches",
}
CONFIG_KEYS = KNOBS | {"device", "base_lr", "base_batch_size", "global_batch", "lr", "env", "hyperparameters"}


@dataclass
class StudyDir:
    """A study file beside a copy of its workload; its default storage is ``<name>.db`` in the same folder.
    ``env``: the environment of the `autotune` processes started here (None: this process's)."""

    folder: Path
    name: str
    env: dict[str, str] | None = field(default=None, repr=False)

    @property
    def file(self) -> Path:
        return self.folder / "study.yaml"

    @property
    def db(self) -> Path:
        return self.folder / f"{self.name}.db"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db}"

    @property
    def runs(self) -> Path:
        return self.folder / "runs" / self.name

    def trial_dir(self, number: int) -> Path:
        return self.runs / f"trial-{number:04d}"

    def _env(self, extra: dict[str, str] | None) -> dict[str, str] | None:
        if self.env is None and not extra:
            return None
        return {**(os.environ if self.env is None else self.env), **(extra or {})}

    def autotune(self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a user runs it from the study's folder."""
        return subprocess.run(
            [sys.executable, "-m", "autotune.cli", *args], cwd=self.folder, capture_output=True, text=True,
            timeout=timeout, check=False, env=self._env(env), stdin=subprocess.DEVNULL,
        )

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The same CLI run in this process (tests/_cli.py), from the study's folder, with the environment
        ``autotune`` would give its process: for tests where the Python start is not what they check."""
        full = self._env(env)
        changes: dict[str, str | None] = {}
        if full is not None:
            changes = {k: v for k, v in full.items() if os.environ.get(k) != v}
            changes.update({k: None for k in os.environ if k not in full})
        out = in_process(*args, cwd=self.folder, env=changes)
        return subprocess.CompletedProcess(["autotune", *args], out.exit_code, out.stdout, out.stderr)

    def popen(self, *args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "autotune.cli", *args], cwd=self.folder, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self._env(env),
            )

    def load(self) -> optuna.Study:
        return optuna.load_study(study_name=self.name, storage=self.url)

    def copy_to(self, folder: Path) -> StudyDir:
        """The study file, the workload and the database (not the trial folders) in another folder."""
        folder.mkdir(parents=True)
        for name in ("study.yaml", "faulty.py", self.db.name):
            shutil.copy2(self.folder / name, folder / name)
        return dataclasses.replace(self, folder=folder)


def make_study(folder: Path, name: str, *, workload_args: dict[str, Any] | None = None,
               trial: dict[str, Any] | None = None, **sections: Any) -> StudyDir:
    """Write ``study.yaml`` (the faulty workload, short trials, any other sections) and copy faulty.py."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(TRIAL_RUNNER_TESTS / "faulty.py", folder / "faulty.py")
    doc: dict[str, Any] = {
        "name": name,
        "workload": {"entrypoint": "faulty.py:build", "args": {"fault": "none", **(workload_args or {})}},
        "trial": {**SHORT_TRIAL, **(trial or {})},
        **sections,
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return StudyDir(folder, name)


def budget_trials(study: optuna.Study) -> list[int]:
    """The trials that count toward ``--n-trials`` (docs/storage.md): finished baseline and search trials,
    except those interrupted (their retry counts instead)."""
    return [
        t.number for t in study.get_trials(deepcopy=False)
        if t.state.is_finished() and t.user_attrs.get("role") in ("baseline", "search")
        and t.user_attrs.get("outcome") != "interrupted"
    ]


def finished_snapshot(study: optuna.Study) -> dict[int, tuple[Any, ...]]:
    """What must never change about a finished trial: state, values, params, attributes, completion time."""
    return {
        t.number: (t.state, t.values, t.params, json.dumps(t.user_attrs, sort_keys=True), t.datetime_complete)
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished()
    }


def assert_nothing_left(study: optuna.Study, sd: StudyDir) -> None:
    """No process of the run outlives it: none of any trial (torchrun, ranks, DataLoader workers), and
    nothing else the tuner started (the warm launcher's zygote)."""
    dirs = {Path(t.user_attrs["trial_dir"]) for t in study.get_trials(deepcopy=False) if "trial_dir" in t.user_attrs}
    dirs |= set(sd.runs.glob("trial-*")) if sd.runs.exists() else set()
    assert dirs, "no trial folder recorded"
    for trial_dir in sorted(dirs):
        assert not wait_no_leftovers(trial_dir, within_s=10), f"processes of {trial_dir} outlived the run"
    assert not wait_none_in(sd.folder), "processes started by the tuner outlived it"


@pytest.fixture
def study_dir(tmp_path: Path) -> Any:
    def make(name: str, **kwargs: Any) -> StudyDir:
        return make_study(tmp_path / name, name, **kwargs)

    return make
