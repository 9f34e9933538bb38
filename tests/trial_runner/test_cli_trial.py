"""`autotune trial`: one trial from the command line, and a tuner killed with SIGKILL leaving nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._cli import autotune
from tests._processes import leftovers, wait_no_leftovers

from .conftest import HERE


def _study(tmp_path: Path, fault: str = "none", max_steps: int = 12) -> Path:
    (tmp_path / "faulty.py").write_text((HERE / "faulty.py").read_text())
    study = tmp_path / "study.yaml"
    study.write_text(
        f"""
name: cli-trial
workload:
  entrypoint: faulty.py:build
  args: {{fault: {fault}, at_step: 1}}
search_space:
  amp: bf16
trial: {{warmup_steps: 2, max_steps: {max_steps}, max_seconds: 60, report_every: 2}}
constraints: {{max_memory_mb: 3000}}
"""
    )
    return study


@pytest.mark.slow
def test_trial_json_reports_outcome_metrics_and_config(tmp_path: Path) -> None:
    study = _study(tmp_path)
    out = autotune("trial", str(study), "--set", "world_size=2", "--set", "batch_size=16", "--json")  # in-process
    assert out.exit_code == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["outcome"] == "complete"
    assert payload["config"]["world_size"] == 2 and payload["config"]["batch_size"] == 16
    assert payload["config"]["amp"] == "bf16"  # fixed in the study's search space
    assert payload["config"]["num_workers"] == 0  # not in the search space: its default
    assert payload["throughput_samples_s"] > 0 and payload["peak_memory_mb"] > 0
    for key in ("step_anatomy", "step_anatomy_mean"):  # where a step went: the slowest rank and the ranks' mean
        anatomy = payload[key]
        assert set(anatomy) == {"data_wait_s", "forward_backward_s", "sync_exposed_s", "optimizer_s", "other_s",
                                "data_wait_share", "pipeline_bubble_s", "tp_comm_exposed_s"}
        assert anatomy["pipeline_bubble_s"] is None and anatomy["tp_comm_exposed_s"] is None  # no mesh
        assert anatomy["forward_backward_s"] > 0 and 0 <= anatomy["data_wait_share"] <= 1
    trial_dir = Path(payload["trial_dir"])
    assert trial_dir.parent == tmp_path / "runs" / "cli-trial"
    assert json.loads((trial_dir / "config.json").read_text())["config"]["global_batch"] == 32


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["batch_sise=16"], "did you mean 'batch_size'"),
        # DDP's no_sync() under a static graph fails inside torch (pytorch/pytorch#143580)
        (["static_graph=true", "grad_accum=2", "world_size=2"],
         "--set: static_graph cannot be combined with grad_accum above 1"),
    ],
)
def test_trial_bad_knob_is_one_line_and_launches_nothing(tmp_path: Path, sets: list[str], message: str) -> None:
    study = _study(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "trial", str(study), *[a for s in sets for a in ("--set", s)]],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert message in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_tuner_killed_with_sigkill_takes_its_trial_along(tmp_path: Path) -> None:
    study = _study(tmp_path, fault="slow", max_steps=100000)
    trial_dir = tmp_path / "killed"
    tuner = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "trial", str(study), "--set", "world_size=2",
         "--set", "num_workers=1", "--dir", str(trial_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (trial_dir / "metrics.jsonl").exists():  # training for real
            assert time.monotonic() < deadline, "trial never started"
            time.sleep(0.2)
        assert len(leftovers(trial_dir)) >= 5  # torchrun, 2 ranks, 2 DataLoader workers
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=10)
        assert not wait_no_leftovers(trial_dir, within_s=10), "trial processes outlived the tuner"
    finally:
        if tuner.poll() is None:
            tuner.kill()


def _trial(study: Path, *args: str, columns: str | None = "200") -> subprocess.CompletedProcess[str]:
    """`autotune [ARGS[0]] trial STUDY ARGS[1:]` in this process (tests/_cli.py): what these tests read is the
    command's answer (the bad-knob and SIGKILL tests start it as a process). ``columns``:
    the COLUMNS variable (None: unset, so output that is no terminal is 80 columns wide, as in a pipe)."""
    head = [a for a in args[:1] if a]
    out = autotune(*head, "trial", str(study), *args[1:], env={"COLUMNS": columns})
    return subprocess.CompletedProcess(["autotune", *head, "trial"], out.exit_code, out.stdout, out.stderr)


@pytest.mark.slow
def test_a_crashed_trial_exits_1_and_shows_the_workloads_error_first(tmp_path: Path) -> None:
    # --set takes a study-file key too: the workload's argument turns the fault on for this trial only. The
    # folder's long name takes the `at FILE:LINE` line past 80 columns, the width of output that is no
    # terminal (a pipe, a log file): the line stays whole all the same.
    folder = tmp_path / "a-folder-whose-name-is-long-enough-to-take-the-path-past-eighty-columns"
    folder.mkdir()
    study = _study(folder, max_steps=6)
    out = _trial(study, "", "--set", "workload.args.fault=raise", "--set", "trial.max_steps=4", columns=None)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("crashed  rank ") and "RuntimeError: injected failure" in lines[0]
    assert lines[1].startswith("RuntimeError: injected failure on rank 0")
    faulty = folder / "faulty.py"
    line_no = next(i for i, ln in enumerate(faulty.read_text().splitlines(), 1) if "injected failure" in ln)
    assert len(lines[2]) > 80 and lines[2].strip() == f"at {faulty}:{line_no} in __call__"
    assert "worker.py" not in out.stdout and "_training.py" not in out.stdout  # autotune's frames: --debug
    assert "--debug shows them" in out.stdout
    debug = _trial(study, "--debug", "--set", "workload.args.fault=raise", "--set", "trial.max_steps=4",
                   columns=None)
    assert debug.returncode == 1
    assert "_training.py" in debug.stdout and f"at {faulty}:{line_no}" in debug.stdout
    assert "raise" not in study.read_text()  # an override never edits the file


@pytest.mark.slow
def test_a_diverged_trial_exits_1_in_json_too(tmp_path: Path) -> None:
    study = _study(tmp_path, fault="nan", max_steps=6)
    out = _trial(study, "", "--json")
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["outcome"] == "diverged"


def test_a_bad_study_key_in_trial_set_is_one_line(tmp_path: Path) -> None:
    study = _study(tmp_path)
    out = _trial(study, "", "--set", "trial.max_stepz=4")
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert "max_stepz" in line
    assert not (tmp_path / "runs").exists()


def _mesh_study(tmp_path: Path, sabotage: bool) -> Path:
    (tmp_path / "mesh_workload.py").write_text((HERE / "mesh_workload.py").read_text())
    study = tmp_path / "study.yaml"
    study.write_text(f"""
name: cli-parity
workload: {{entrypoint: mesh_workload.py:build, args: {{sabotage: {str(sabotage).lower()}}}}}
search_space: {{batch_size: 16}}
trial: {{max_steps: 20, max_seconds: 120}}
""")
    return study


@pytest.mark.slow
@pytest.mark.parametrize("sabotage", [False, True])
def test_check_parity_compares_a_mesh_with_one_rank(tmp_path: Path, sabotage: bool) -> None:
    study = _mesh_study(tmp_path, sabotage)
    out = _trial(study, "", "--set", "world_size=2", "--set", "tensor_parallel=2", "--check-parity", columns=None)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("parity: "))  # one line, also in a pipe
    assert "over 20 steps" in line, out.stdout
    gap = float(line.split("difference ")[1].split()[0])
    if sabotage:  # a hook that changes the model: a step's loss moves far past the tolerance, exit 1
        assert out.returncode == 1 and gap > 1e-3 and "PAST the tolerance" in out.stdout
    else:
        assert out.returncode == 0 and gap < 1e-4 and "within the tolerance 0.0001" in out.stdout
