"""A whole study whose trials run through srun at world size 2 on the local SLURM cluster, and the example
study files, which validate without a cluster or a database."""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests._cli import autotune
from tests.conftest import SlurmCluster

ROOT = Path(__file__).resolve().parent.parent.parent
FAULTY = ROOT / "tests" / "trial_runner" / "faulty.py"

STUDY = """
name: on-slurm
workload:
  entrypoint: faulty.py:build
  args: {samples: 512}
launcher: {kind: slurm, nodes: 1, srun_args: ["--kill-on-bad-exit=1"]}
search_space:
  batch_size: {choices: [16, 32]}
  world_size: 2
baseline: {world_size: 2}
trial: {warmup_steps: 1, max_steps: 5, max_seconds: 90, report_every: 1}
sampler: {name: random, seed: 0}
pruner: {name: none}
confirm: {top_k: 0}
"""


@pytest.mark.slow
def test_a_study_runs_its_trials_as_srun_steps_at_world_size_2(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    (tmp_path / "faulty.py").write_text(FAULTY.read_text())
    (tmp_path / "study.yaml").write_text(STUDY)
    # in-process: the trials are the point; two (the baseline and one more), each a job step of its own
    out = autotune("run", "study.yaml", "--n-trials", "2", cwd=tmp_path)
    assert out.exit_code == 0, out.stdout[-2000:] + out.stderr[-2000:]
    study = optuna.load_study(study_name="on-slurm", storage=f"sqlite:///{tmp_path / 'on-slurm.db'}")
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    steps = set()
    for t in trials:
        assert t.user_attrs["outcome"] == "complete" and t.user_attrs["config"]["world_size"] == 2
        folder = Path(t.user_attrs["trial_dir"])
        assert sorted(p.name for p in folder.glob("rank*.log")) == ["rank0.log", "rank1.log"]
        steps.add((folder / "slurm.step").read_text().strip())  # a job step of its own
    assert len(steps) == 2
    assert not [s for s in slurm_cluster.steps() if "autotune-trial-" in s]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once we return: nothing listens there


@pytest.mark.slow
def test_the_example_studies_validate_without_a_cluster_or_a_database() -> None:
    # in this process (tests/_cli.py): what is checked is validate's answer, not a Python start
    for name in ("slurm.yaml", "postgres.yaml"):
        out = autotune("validate", str(ROOT / "studies" / name))
        assert out.exit_code == 0, out.stderr
    # The PostgreSQL URL is checked for its shape only: no server needs to answer.
    url = f"postgresql+psycopg://autotune@127.0.0.1:{_closed_port()}/nowhere"
    out = autotune("validate", str(ROOT / "studies" / "postgres.yaml"), "--set", f"storage={url}")
    assert out.exit_code == 0, out.stderr
    bad = autotune("validate", str(ROOT / "studies" / "postgres.yaml"), "--set", "storage=postgresql+psycopg:///no-host")
    assert bad.exit_code == 2 and "needs a host" in bad.stderr
