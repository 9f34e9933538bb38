"""A broken workload stops the study early (baseline + next trials, one error in the workload's code).

The rule is checked on trial records, then for real: a workload that fails only inside a rank (validate
cannot see it) stops `autotune run` after three trials with one line and exit 1, instead of its budget.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import torch

import autotune
from autotune.tuner import STOP_AFTER, find_broken
from tests._cli import autotune as in_process

USER_FILE = "/home/user/project/wl.py"
AUTOTUNE_FILE = Path(autotune.__file__).parent / "trial_runner" / "_training.py"
TORCH_FILE = Path(torch.__file__).parent / "nn" / "modules" / "module.py"
LINES = [
    "Traceback (most recent call last):",
    f'  File "{AUTOTUNE_FILE}", line 300, in step',
    "    loss = self.workload.loss(self.model, batch)",
    f'  File "{USER_FILE}", line 10, in loss',
    "    return model(x, y)",
    f'  File "{TORCH_FILE}", line 1778, in _wrapped_call_impl',
    "    return self._call_impl(*args, **kwargs)",
    "TypeError: forward() takes 2 positional arguments but 3 were given",
]
ERROR = "rank 0: TypeError: forward() takes 2 positional arguments but 3 were given"


def trial(number: int, outcome: str = "crashed", reason: str = ERROR, bs: int | None = None,
          lines: list[str] | None = None, role: str | None = None) -> Any:
    return SimpleNamespace(number=number, user_attrs={
        "role": role or ("baseline" if number == 0 else "search"), "outcome": outcome, "reason": reason,
        "config_key": f"bs={bs if bs is not None else 8 + number}", "error_lines": LINES if lines is None else lines,
    })


def test_the_same_workload_error_in_the_baseline_and_the_next_trials_is_broken() -> None:
    verdict = find_broken([trial(i) for i in range(STOP_AFTER)])
    assert verdict is not None
    assert verdict.trials == [0, 1, 2]
    assert verdict.error == "TypeError: forward() takes 2 positional arguments but 3 were given"
    assert verdict.where == f"{USER_FILE}:10 in loss"
    message = verdict.message("study.yaml")
    assert "stopped early" in message and "`autotune trial study.yaml`" in message and "\n" not in message


def test_numbers_in_the_message_do_not_make_errors_different() -> None:
    trials = [trial(i, reason=f"rank {i % 2}: RuntimeError: shape [{8 + i}, 4] is invalid") for i in range(3)]
    assert find_broken(trials) is not None


def test_what_is_not_a_broken_workload() -> None:
    assert find_broken([trial(0), trial(1)]) is None  # too few yet
    assert find_broken([trial(0), trial(1), trial(2, outcome="complete")]) is None  # one configuration works
    assert find_broken([trial(0), trial(1), trial(2, outcome="pruned"), trial(3)]) is None
    assert find_broken([trial(0), trial(1), trial(2, reason="rank 0: ValueError: other")]) is None
    assert find_broken([trial(0), trial(1), trial(2, outcome="oom")]) is None
    assert find_broken([trial(0, bs=8), trial(1, bs=8), trial(2, bs=8)]) is None  # one configuration, thrice
    assert find_broken([trial(i, reason="rank 0 killed by SIGSEGV", lines=[]) for i in range(3)]) is None
    oom = "rank 0: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert find_broken([trial(i, reason=oom) for i in range(3)]) is None
    small = "rank 0: DatasetTooSmall: the dataset has 4 samples: 4 per rank, fewer than one batch of 8"
    assert find_broken([trial(i, reason=small, lines=[]) for i in range(3)]) is None
    library_only = [ln for ln in LINES if USER_FILE not in ln and "return model" not in ln]
    assert find_broken([trial(i, lines=library_only) for i in range(3)]) is None  # not the workload's code
    assert find_broken([trial(i, role="search") for i in range(3)]) is None  # no baseline among them


def test_autotunes_own_check_of_the_workload_counts() -> None:
    reason = "rank 0: TypeError: Workload.loss returned a tuple, not a scalar tensor; return its first element ([0])"
    assert find_broken([trial(i, reason=reason, lines=[]) for i in range(3)]) is not None


WORKLOAD = """\
import os
import torch
from torch import nn
import autotune


def loss(model, batch):
    x, y = batch
    if "RANK" in os.environ:  # only inside a trial's rank: validate cannot see it
        return model(x, y)
    return nn.functional.mse_loss(model(x), y)


def build():
    return autotune.Workload(
        model=lambda: nn.Linear(4, 1),
        dataset=lambda: torch.utils.data.TensorDataset(torch.randn(256, 4), torch.randn(256, 1)),
        loss=loss, base_batch_size=16,
    )
"""


@pytest.mark.slow
def test_run_stops_early_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "wl.py").write_text(WORKLOAD)
    (tmp_path / "study.yaml").write_text(
        "name: broken\nworkload: {entrypoint: wl.py:build}\n"
        "search_space: {batch_size: {low: 4, high: 32, log: true}}\n"
        "trial: {warmup_steps: 1, max_steps: 4, max_seconds: 60}\nbudget: {n_trials: 12}\n"
    )
    # (the CLI in this process, tests/_cli.py: what is checked is the exit status and the one line)
    check = in_process("validate", "study.yaml", cwd=tmp_path)
    assert check.exit_code == 0, check.output  # in-process the loss works: only the ranks fail
    out = in_process("run", "study.yaml", cwd=tmp_path)
    assert out.exit_code == 1, out.output
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out.stderr
    assert "stopped early" in errors[0] and "`autotune trial study.yaml`" in errors[0]
    assert f"at {tmp_path / 'wl.py'}:10 in loss" in errors[0]
    assert "Traceback" not in out.stdout + out.stderr
    study = optuna.load_study(study_name="broken", storage=f"sqlite:///{tmp_path / 'broken.db'}")
    assert len(study.trials) == STOP_AFTER  # not the budget of 12
    assert {t.user_attrs["outcome"] for t in study.trials} == {"crashed"}


def test_the_users_frame_is_read_from_the_ranks_record_when_the_stored_lines_lost_it(tmp_path: Path) -> None:
    """The study keeps a trial's last 15 lines; under a deep library stack the user's frame is above them."""
    import json

    library_only = [ln for ln in LINES if USER_FILE not in ln and "return model" not in ln]
    trials = [trial(i, lines=library_only) for i in range(3)]
    (tmp_path / "errors").mkdir()
    (tmp_path / "errors" / "rank0.json").write_text(json.dumps({"time": 1.0, "where": f"{USER_FILE}:10 in loss"}))
    trials[-1].user_attrs["trial_dir"] = str(tmp_path)
    verdict = find_broken(trials)
    assert verdict is not None and verdict.where == f"{USER_FILE}:10 in loss"
