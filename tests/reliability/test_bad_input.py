"""Bad input everywhere `autotune run` takes it: study files, --set and --storage overrides, command-line
arguments, and workloads that fail in their ranks. Bad input is refused before anything is written (exit 2,
one line naming the file, the field and the fix); a workload that fails in its ranks gets a trial outcome
that says why, and the study goes on.

The study files are tests/test_spec.py's (82 of them, there through ``autotune validate``), here through
``autotune run``, plus overrides only ``run`` takes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from tests.test_spec import CASES, Case, case, check_error_line, listing, write_study

from .conftest import StudyDir, assert_nothing_left

# fmt: off
RUN_CASES = [
    case("run_storage_not_a_url", "", "storage", "is not a database URL", args=("--storage", "not a url")),
    case("run_storage_password_no_host", "", "storage", "needs a host", secret="hunter2",
         args=("--storage", "postgresql+psycopg://bob:hunter2@/autotune")),
    case("run_storage_unsupported", "", "storage", "unsupported database 'mongodb'",
         args=("--storage", "mongodb://db.example/x")),
    case("run_set_budget_zero", "", "budget.n_trials", "at least 1", args=("--set", "budget.n_trials=0")),
    case("run_set_range_reversed", "", "search_space.batch_size", "low (64) is greater than high (8)",
         args=("--set", "search_space.batch_size={low: 64, high: 8}")),
    case("run_set_negative_hang", "", "trial.hang_seconds", "above 0", args=("--set", "trial.hang_seconds=-5")),
    case("run_set_unknown_launcher", "", "launcher.kind", "'k8s'", args=("--set", "launcher.kind=k8s")),
    case("run_set_seed_not_int", "", "sampler.seed", "'abc' is not an integer", args=("--set", "sampler.seed=abc")),
    case("run_set_zero_budget_mb", "", "constraints.max_memory_mb", "above 0",
         args=("--set", "constraints.max_memory_mb=0")),
    case("run_set_no_key", "", "--set '=3'", "expected key=value", args=("--set", "=3")),
    case("run_set_unknown_knob", "", "search_space.bach_size", "did you mean 'batch_size'",
         args=("--set", "search_space.bach_size=32")),
]
# fmt: on
ALL = CASES + RUN_CASES
assert len(ALL) >= 30 and len({c.id for c in ALL}) == len(ALL)
SUBPROCESS = ["low_greater_than_high", "entrypoint_raises", "entrypoint_wrong_return_type",
              "tag_python_apply_os_system", "run_storage_password_no_host", "run_set_budget_zero"]


def nothing_written(folder: Path, before: dict[str, tuple[int, int]]) -> None:
    assert listing(folder) == before, "a refused study must not write anything"
    assert not list(folder.glob("*.db")) and not (folder / "runs").exists()
    assert not (folder / "PWNED").exists()


VALIDATE_ONLY = ("--no-build",)  # validate's options that a bad-study case may carry


@pytest.mark.parametrize("c", ALL, ids=[c.id for c in ALL])
def test_a_bad_study_is_refused_by_run_before_anything_is_written(
    c: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "study"
    study = write_study(folder, c)
    monkeypatch.chdir(folder)
    before = listing(folder)
    run_args = [a for a in c.args if a not in VALIDATE_ONLY]  # run refuses before any build
    result = CliRunner().invoke(main, ["run", str(study), *run_args])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    check_error_line(result.stderr, result.stdout, study, c)
    nothing_written(folder, before)


@pytest.mark.slow
@pytest.mark.parametrize("c", [c for c in ALL if c.id in SUBPROCESS], ids=lambda c: c.id)
def test_a_bad_study_is_refused_by_the_real_cli(c: Case, tmp_path: Path) -> None:
    folder = tmp_path / "study"
    write_study(folder, c)
    before = listing(folder)
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "run", "study.yaml",
                          *[a for a in c.args if a not in VALIDATE_ONLY]], cwd=folder,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stdout + out.stderr
    check_error_line(out.stderr, out.stdout, Path("study.yaml"), c)
    nothing_written(folder, before)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--n-trials", "0"], "Invalid value for '--n-trials': 0 is not in the range x>=1"),
        (["--n-trials", "-3"], "Invalid value for '--n-trials'"),
        (["--n-trials", "many"], "'many' is not a valid integer"),
        (["--timeout", "-1"], "Invalid value for '--timeout': -1.0 is not in the range x>0"),
        (["--timeout", "0"], "Invalid value for '--timeout'"),
        (["--trials", "3"], "No such option '--trials'. Did you mean '--n-trials'?"),
    ],
    ids=["n_trials_zero", "n_trials_negative", "n_trials_word", "timeout_negative", "timeout_zero", "unknown_option"],
)
def test_bad_command_line_arguments_are_refused(tmp_path: Path, args: list[str], expect: str) -> None:
    folder = tmp_path / "study"
    write_study(folder, Case("valid", "name: probe\nworkload: {entrypoint: 'wl.py:build'}\n", ()))
    before = listing(folder)
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "run", "study.yaml", *args], cwd=folder,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stdout + out.stderr
    # one line naming the option and the rule, and where the help is: not click's usage block
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], out.stderr
    assert lines[0].endswith("(see `autotune run --help`)"), out.stderr
    assert out.stdout == ""
    nothing_written(folder, before)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["runn"], "error: No such command 'runn'. Did you mean 'run'? (see `autotune --help`)"),
        (["run"], "error: Missing argument 'STUDY_FILE'. (see `autotune run --help`)"),
        (["--verbose"], "error: No such option '--verbose'. Did you mean '--version'? (see `autotune --help`)"),
    ],
    ids=["unknown_command", "missing_argument", "unknown_global_option"],
)
def test_a_bad_command_line_is_one_line(tmp_path: Path, args: list[str], expect: str) -> None:
    out = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (out.returncode, out.stderr.splitlines(), out.stdout) == (2, [expect], "")
    assert list(tmp_path.iterdir()) == []


def test_help_and_version_still_print_and_exit_0(tmp_path: Path) -> None:
    for args, expect in ((["--help"], "Usage: autotune [OPTIONS] COMMAND"), (["run", "-h"], "Usage: autotune run"),
                         (["--version"], "autotune, version")):
        out = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and out.stdout.startswith(expect) and out.stderr == "", (args, out)


@pytest.mark.parametrize("what", ["missing_file", "a_folder"])
def test_a_study_file_that_is_not_there(tmp_path: Path, what: str) -> None:
    target = tmp_path / "nope.yaml" if what == "missing_file" else tmp_path
    before = listing(tmp_path)
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(target)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    fix = "no such file; check the path" if what == "missing_file" else "is a folder; give the study .yaml file"
    assert out.stderr.splitlines() == [f"error: {target}: {fix}"]
    assert listing(tmp_path) == before


# ------------------------------------------------------------------------------------- workloads that fail
@pytest.mark.slow
@pytest.mark.parametrize(
    ("entrypoint", "reason"),
    [
        ("build_tiny_dataset", "rank 0: DatasetTooSmall: the dataset has 4 samples: 4 per rank, fewer than one batch "
                               "of 8; use a smaller batch_size or a larger dataset"),
        ("build_no_parameters", "rank 0: ValueError: the workload's model has no trainable parameters"),
        ("build_model_raises", "rank 0: RuntimeError: checkpoint /weights/model.pt not found"),
        ("build_loss_returns_float", "rank 0: TypeError: Workload.loss returned a Python float, not a tensor"),
    ],
    ids=["tiny_dataset", "no_parameters", "model_raises", "loss_returns_float"],
)
def test_a_workload_that_fails_in_its_ranks_is_a_clear_trial_outcome(
    make_study: Callable[..., StudyDir], started: float, entrypoint: str, reason: str
) -> None:
    sd = make_study(f"wl-{entrypoint.replace('_', '-')}", entrypoint=f"chaos.py:{entrypoint}",
                    trial={"warmup_steps": 1, "max_steps": 4})
    out = sd.cli("run", "study.yaml", "--n-trials", "1")
    assert out.returncode == 1, out.stdout + out.stderr  # nothing usable: scripts can tell
    assert "Traceback" not in out.stdout + out.stderr
    assert "no trial completed: nothing to recommend" in out.stdout
    (trial,) = sd.load().trials
    assert trial.user_attrs["outcome"] == "crashed"
    assert trial.user_attrs["reason"].startswith(reason), trial.user_attrs["reason"]
    assert trial.user_attrs["error_lines"], "the rank's last lines are kept"
    best = sd.cli("best", "study.yaml")
    assert best.returncode == 2 and len(best.stderr.splitlines()) == 1, best.stderr
    assert "has completed yet" in best.stderr
    assert_nothing_left(sd, started)


@pytest.mark.slow
@pytest.mark.parametrize(("entrypoint", "expect"), [
    ("build_raises", "RuntimeError: the dataset folder /data/imagenet is missing"),
    ("build_wrong_type", "returned dict, not autotune.Workload"),
], ids=["raises", "wrong_type"])
def test_a_workload_entrypoint_that_fails_is_refused_before_launch(
    make_study: Callable[..., StudyDir], entrypoint: str, expect: str
) -> None:
    sd = make_study(f"ep-{entrypoint.replace('_', '-')}", entrypoint=f"chaos.py:{entrypoint}")
    before = listing(sd.folder)
    out = sd.cli("run", "study.yaml")
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: study.yaml: workload.entrypoint: ") and expect in line, line
    assert out.stdout == ""
    nothing_written(sd.folder, before)

