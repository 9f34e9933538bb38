"""A study that holds its global batch (constraints.global_batch), through the real Tuner with replayed trials and a
real SQLite file: every sampler proposes feasible splits only, one learning rate throughout; the summary, `best`,
the report and the Calibration show the split; a warm start never crosses global batches."""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from rich.console import Console

from autotune.calibration import load_calibration
from autotune.cli._results import best_payload
from autotune.cli._run_summary import print_summary
from autotune.errors import UsageError
from autotune.report import render_html, report_data
from autotune.search_space import SPLIT_PARAM, TrialConfig
from autotune.tuner import (
    Measured,
    NoLaunch,
    Tuner,
    TuneSummary,
    compare_fingerprints,
    describe_fingerprint,
    replay_runner,
    study_fingerprint,
)
from autotune.workload_check import load_spec

SEARCH = {
    "batch_size": {"low": 8, "high": 512, "log": True}, "grad_accum": {"choices": [1, 2, 4, 8]},
    "world_size": {"choices": [1, 2, 4]}, "num_workers": {"low": 0, "high": 2}, "lr_scaling": "sqrt",
}


def _landscape(config: TrialConfig, repeat: int) -> Measured:
    """Faster with more ranks, with micro-batches up to 64, and slower with accumulation."""
    speed = 1000.0 * min(config.batch_size, 64) / 64 * config.world_size**0.5 / (1 + 0.1 * config.grad_accum)
    return Measured(speed + 10.0 * config.num_workers)


def _write(folder: Path, name: str, held: Any, sampler: str = "tpe", n_trials: int = 12, **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "name": name, "storage": "sqlite:///studies.db",
        "workload": {"entrypoint": "autotune.workloads.mlp:build", "args": {"hidden": 16, "depth": 1}},
        "trial": {"warmup_steps": 2, "max_steps": 20, "report_every": 3},
        "search_space": SEARCH, "constraints": {"global_batch": held}, "sampler": {"name": sampler, "seed": 0},
        "confirm": {"top_k": 0}, "budget": {"n_trials": n_trials}, **extra,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(path: Path) -> TuneSummary:
    return Tuner(load_spec(str(path)), launcher=NoLaunch(), run_trial=replay_runner(_landscape)).run()


def _trials(path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path.parent / 'studies.db'}")
    return study.get_trials(deepcopy=False)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["gp", "tpe", "random", "grid", "qmc", "nsga2"])
def test_every_sampler_proposes_feasible_splits_only_at_one_learning_rate(sampler: str, tmp_path: Path) -> None:
    path = _write(tmp_path, f"held-{sampler}", 256, sampler=sampler)
    _run(path)
    trials = _trials(path, f"held-{sampler}")
    assert len(trials) == 12
    configs = [TrialConfig.model_validate(t.user_attrs["config"]) for t in trials]
    assert [c.batch_size * c.grad_accum * c.world_size for c in configs] == [256] * 12
    assert {c.lr for c in configs} == {configs[0].base_lr}  # lr_scaling sqrt in the file: not applied
    searched = [t for t in trials if t.user_attrs.get("role") == "search"]
    assert searched and all(set(t.params) == {SPLIT_PARAM, "num_workers"} for t in searched)
    assert all(t.params[SPLIT_PARAM] == f"{c.batch_size}x{c.grad_accum}x{c.world_size}"
               for t, c in zip(trials, configs, strict=True) if SPLIT_PARAM in t.params)
    assert len({t.params[SPLIT_PARAM] for t in searched}) >= 4  # the search moves between splits


@pytest.mark.slow
def test_the_summary_best_report_and_calibration_show_the_split(tmp_path: Path) -> None:
    path = _write(tmp_path, "held-shown", {"choices": [256, 512]}, sampler="random", n_trials=8)
    summary = _run(path)
    assert summary.global_batch_held == (256, 512) and summary.best_config is not None
    best = summary.best_config
    split = f"{best.batch_size}x{best.grad_accum}x{best.world_size}"
    assert best.global_batch in (256, 512)

    out = io.StringIO()
    print_summary(Console(file=out, width=300), summary, load_spec(str(path)))
    assert (f"global batch held at 256, 512 (constraints.global_batch): only its splits were tried, each at the "
            f"workload's base_lr (lr {best.lr:.3g}; lr_scaling not applied); the best splits {best.global_batch} as "
            f"{split} (batch_size x grad_accum x world_size)") in out.getvalue()

    payload = best_payload(str(path))
    assert payload["derived"]["split"] == split and payload["derived"]["global_batch_held"] is True
    assert payload["derived"]["global_batch"] == best.global_batch

    calibration = load_calibration(str(path))
    assert calibration.global_batch_held and calibration.split.label == split
    assert f"global batch {best.global_batch} held, split {split}" in calibration.summary()

    study = optuna.load_study(study_name="held-shown", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    data = report_data(study)
    held = data.headline.held
    assert held is not None and held.startswith("global batch held at 256, 512 (constraints.global_batch): ")
    assert f"the best splits it as {split}" in held and "the baseline splits it as 256x1x1" in held
    assert f'<b>Global batch</b>: <span id="held">{html.escape(held)}</span>' in render_html(data)


@pytest.mark.slow
def test_without_a_held_global_batch_the_report_says_nothing_of_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "free", None, sampler="random", n_trials=3)
    summary = _run(path)
    assert summary.global_batch_held == ()
    assert best_payload(str(path))["derived"]["global_batch_held"] is False
    study = optuna.load_study(study_name="free", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    assert report_data(study).headline.held is None
    assert not load_calibration(str(path)).global_batch_held


@pytest.mark.slow
def test_a_warm_start_never_crosses_global_batches(tmp_path: Path) -> None:
    first = _write(tmp_path, "held-256", 256, sampler="random", n_trials=6)
    _run(first)
    other = _write(tmp_path, "held-512", 512, sampler="random", n_trials=2)
    _run(other)
    line = _trials(other, "held-512")[0]  # the baseline; the stored decision says why nothing was queued
    study = optuna.load_study(study_name="held-512", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    stored = study.user_attrs["autotune_warm_start"]
    assert stored["enqueued"] == 0 and "global_batch 256 (here 512)" in stored["line"], stored
    assert line.user_attrs["config"]["global_batch"] == 512
    free = _write(tmp_path, "free", None, sampler="random", n_trials=2)
    _run(free)
    study = optuna.load_study(study_name="free", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    line_free = study.user_attrs["autotune_warm_start"]["line"]
    assert "holds another global batch: global_batch 256 (here not held)" in line_free
    again = _write(tmp_path, "held-256-again", 256, sampler="random", n_trials=4)
    _run(again)
    trials = _trials(again, "held-256-again")
    warm = [t for t in trials if "warm_start" in t.user_attrs]
    assert warm and all(t.user_attrs["warm_start"]["study"] == "held-256" for t in warm)
    assert all(t.user_attrs["config"]["global_batch"] == 256 for t in trials)


def test_the_fingerprint_holds_the_global_batch_and_a_different_one_blocks(tmp_path: Path) -> None:
    held = study_fingerprint(load_spec(str(_write(tmp_path, "fp-held", {"choices": [256, 512]}))))
    free = study_fingerprint(load_spec(str(_write(tmp_path, "fp-free", None))))
    assert held["workload"]["global_batch"] == [256, 512] and free["workload"]["global_batch"] is None
    assert compare_fingerprints(held, held).same
    assert compare_fingerprints(held, free).blocking == ("global_batch not held (here {256, 512})",)
    other = {**held, "workload": {**held["workload"], "global_batch": [256]}}
    assert compare_fingerprints(other, held).blocking == ("global_batch {256, 512} (here 256)",)
    # a study stored before the constraint existed has no such field: it held none, as a free study now
    older = {**free, "workload": {k: v for k, v in free["workload"].items() if k != "global_batch"}}
    assert compare_fingerprints(free, older).same
    assert describe_fingerprint(held)[2].endswith(", global batch held at {256, 512}")


@pytest.mark.slow
def test_a_study_resumed_with_another_global_batch_is_refused_and_read_as_it_ran(tmp_path: Path) -> None:
    path = _write(tmp_path, "resumed", 256, sampler="random", n_trials=2)
    _run(path)
    _write(tmp_path, "resumed", 512, sampler="random", n_trials=4)
    with pytest.raises(UsageError, match=r"constraints\.global_batch: the stored study 'resumed' held global batch "
                                         r"256, the file now holds 512; rename the study or restore its global_batch"):
        _run(path)
    _write(tmp_path, "resumed", None, sampler="random", n_trials=4)
    with pytest.raises(UsageError, match="held global batch 256, the file now holds none"):
        _run(path)
    assert len(_trials(path, "resumed")) == 2  # nothing ran
    # reading the study needs no check, and says what it ran with, whatever the file says now
    payload = best_payload(str(path))
    assert payload["derived"]["global_batch_held"] is True and payload["derived"]["global_batch"] == 256
