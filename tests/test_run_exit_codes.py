"""`autotune run` exit codes that scripts can trust, and a summary that does not claim what it cannot know."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from tests._cli import CliRun, autotune
from tests._processes import zygotes

FAULTY = Path(__file__).parent / "trial_runner" / "faulty.py"


def _run(tmp_path: Path, body: str) -> CliRun:
    """`autotune run study.yaml` in this process (tests/_cli.py): its exit status is what is checked, not a start."""
    (tmp_path / "faulty.py").write_text(FAULTY.read_text())
    (tmp_path / "study.yaml").write_text(
        "name: codes\nworkload: {entrypoint: faulty.py:build}\n"
        "trial: {warmup_steps: 1, max_steps: 6, max_seconds: 60, report_every: 1}\n"
        "confirm: {top_k: 0}\n" + body
    )
    return autotune("run", "study.yaml", cwd=tmp_path, env={"COLUMNS": "200"})


@pytest.mark.slow
def test_lr_scaling_under_a_throughput_objective_is_not_decided(tmp_path: Path) -> None:
    out = _run(tmp_path, "search_space: {lr_scaling: {choices: [none, linear]}, batch_size: {choices: [16, 64]}}\n"
                         "objectives: [{metric: throughput}]\nsampler: {name: random, seed: 1}\n"
                         "budget: {n_trials: 3}\n")
    assert out.exit_code == 0, out.output
    row = next(ln for ln in out.stdout.splitlines() if ln.strip("│ ").startswith("lr_scaling"))
    assert "(not decided by this study)" in row and "*" not in row, row
    lr_row = next(ln for ln in out.stdout.splitlines() if ln.strip("│ ").startswith("lr "))
    assert "(not decided by this study)" in lr_row


@pytest.mark.slow
def test_no_usable_trial_exits_1(tmp_path: Path) -> None:
    out = _run(tmp_path, "constraints: {max_memory_mb: 1}\nbudget: {n_trials: 1}\n")  # every trial over budget
    assert out.exit_code == 1, out.output
    assert "nothing to recommend" in out.stdout or "no feasible configuration" in out.stdout
    if "nothing to recommend" in out.stdout:
        assert "`autotune trial study.yaml` runs one trial" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_exit_codes_are_in_the_help() -> None:
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "--help"], capture_output=True, text=True,
                         timeout=60, check=True)
    for fragment in ("Exit status", "0    success", "1    nothing usable", "2    bad input", "130"):
        assert fragment in out.stdout, out.stdout
    for command, fragment in (("run", "no trial completed or none is feasible"),
                              ("trial", "1 for any other outcome")):
        help_text = subprocess.run([sys.executable, "-m", "autotune.cli", command, "--help"], capture_output=True,
                                   text=True, timeout=60, check=True).stdout
        assert fragment in " ".join(help_text.split()), help_text


@pytest.mark.own_zygote  # the command's own zygote is what must not outlive it
@pytest.mark.parametrize("where", ["read_spec", "check_workload_fits"])
def test_ctrl_c_before_the_study_opens_exits_130_in_one_line(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the study file is read, or while its workload is checked (the zygote already importing
    torch beside it), is an interruption, not click's 'Aborted!' with exit 1: scripts telling a stop from a
    failure read 130. The zygote does not outlive the command."""
    import autotune.spec
    import autotune.workload_check

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(autotune.spec if where == "read_spec" else autotune.workload_check, where, interrupted)
    (tmp_path / "faulty.py").write_text(FAULTY.read_text())
    (tmp_path / "study.yaml").write_text("name: codes\nworkload: {entrypoint: faulty.py:build}\n")
    monkeypatch.chdir(tmp_path)

    before = zygotes(recursive=True)  # a session-scoped warm launcher's zygote (tests/trial_runner/) may be one
    out = CliRunner().invoke(main, ["run", "study.yaml"])
    assert out.exit_code == 130, out.output
    assert out.output.strip().splitlines() == ["interrupted: nothing was started or recorded"]
    assert not zygotes(recursive=True) - before
    assert not (tmp_path / "runs").exists() and not (tmp_path / "codes.db").exists()
