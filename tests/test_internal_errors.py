"""No traceback for anyone who did not ask for one: an exception autotune did not raise on purpose (a storage
failing mid-run, a folder that cannot be written, a missing module) is one line on stderr naming what
failed and the file holding the traceback, exit 1; ``--debug`` shows the traceback instead. A study that
stops this way keeps its finished trials and leaves no trial process behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from autotune.cli import main
from autotune.errors import describe_internal_error
from tests.tuner.conftest import StudyDir, assert_nothing_left, make_study

# `autotune run`, with the storage failing when the second trial's result is stored.
FAILING_STORAGE = """
import sys
import sqlalchemy.exc
import autotune.tuner

told = []
real_tell = autotune.tuner.Tuner.tell

def tell(self, study, trial, result):
    if told:
        raise sqlalchemy.exc.OperationalError("UPDATE trials", {}, Exception("database is locked"))
    told.append(trial.number)
    return real_tell(self, study, trial, result)

autotune.tuner.Tuner.tell = tell
from autotune.cli import main
sys.argv = ["autotune", *sys.argv[1:]]
main()
"""


def _traceback_file(line: str) -> Path:
    found = re.search(r"the traceback is in (\S+);", line)
    assert found, line
    return Path(found.group(1))


def _run_failing(sd: StudyDir, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FAILING_STORAGE, *args], cwd=sd.folder, capture_output=True, text=True,
        timeout=180, check=False, stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_storage_failing_mid_run_is_one_line_and_loses_no_finished_trial(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "s", "storage-fails", search_space={"batch_size": {"choices": [8, 16]}},
                             sampler={"name": "random", "seed": 0}, budget={"n_trials": 4})
    out = _run_failing(sd, "run", "study.yaml")
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: autotune run failed: OperationalError"), lines[0]
    assert "Traceback" not in out.stdout + out.stderr
    assert "--debug shows it" in lines[0]
    saved = _traceback_file(lines[0]).read_text()
    assert "Traceback (most recent call last)" in saved and "database is locked" in saved
    study = sd.load()
    first = study.trials[0]
    assert first.state is TrialState.COMPLETE and first.user_attrs["role"] == "baseline"
    assert_nothing_left(study, sd)


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "s", "storage-fails-debug", search_space={"batch_size": {"choices": [8, 16]}},
                             sampler={"name": "random", "seed": 0}, budget={"n_trials": 3})
    out = _run_failing(sd, "--debug", "run", "study.yaml")
    assert out.returncode == 1
    assert "Traceback (most recent call last)" in out.stderr and "OperationalError" in out.stderr


def test_a_report_into_a_folder_that_cannot_exist_is_one_line(tmp_path: Path) -> None:
    from tests.report.studies import SINGLE_PLANS, make

    _, _, study_file = make(tmp_path, "unwritable", [("throughput", "maximize")], SINGLE_PLANS, True)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(main, ["report", str(study_file), "-o", str(blocker / "r.html")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: autotune report failed: "), result.output
    assert str(blocker) in lines[0]
    assert _traceback_file(lines[0]).exists()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ModuleNotFoundError("No module named 'scipy'", name="scipy"),
         "the Python module 'scipy' is not installed (No module named 'scipy'); install the package that "
         "provides it (pip install scipy)"),
        (PermissionError(13, "Permission denied", "/srv/out.html"), "Permission denied: /srv/out.html"),
        (RuntimeError("kaleido: no browser\nfound"), "RuntimeError: kaleido: no browser found"),
    ],
)
def test_the_line_says_what_failed_in_words(error: Exception, expected: str) -> None:
    line = describe_internal_error(error, "autotune report")
    assert line.startswith(f"autotune report failed: {expected}")
    assert "\n" not in line
    assert _traceback_file(line + ";").exists() or "the traceback is in" in line
