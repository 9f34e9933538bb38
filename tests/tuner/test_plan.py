"""`autotune plan` and `Calibration.plan` on real studies: the tuner runs each study over a landscape whose
throughput follows a known scale model (its replay seam), then the CLI reads the stored study: in this process
(tests/_cli.py), but for one test that starts `autotune plan` as a user's shell would."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.calibration import load_calibration
from autotune.errors import UsageError
from autotune.objectives import NOISE_SCALE_ATTR
from autotune.scale import efficiency
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir, make_study

pytestmark = pytest.mark.slow  # the replayed studies write a real SQLite study each: seconds

TRIAL = {"warmup_steps": 2, "max_steps": 11, "report_every": 3}
FIXED = {"sampler": {"name": "grid"}, "pruner": {"name": "none"}, "confirm": {"top_k": 0}}


def true_step(nodes: int, ranks: int, batch: int, accum: int = 1) -> float:
    """The landscape's truth: compute 0.01 + 0.001 s/sample, sync 0.02 + 0.004 s per rank past 2 within a
    node, 0.08 s across nodes, overlapping with gamma 2."""
    grad = 0.01 + 0.001 * batch
    sync = 0.0 if ranks == 1 else (0.02 + 0.004 * (ranks - 2) if nodes == 1 else 0.08)
    return (accum - 1) * grad + (grad**2 + sync**2) ** 0.5


def landscape(nodes: int) -> Callable[[TrialConfig, int], Measured]:
    def measure(config: TrialConfig, repeat: int) -> Measured:
        step = true_step(nodes, config.world_size, config.batch_size, config.grad_accum)
        return Measured(config.global_batch / step * (1.01 if repeat % 2 else 0.99))

    return measure


def replayed(sd: StudyDir, n_trials: int, nodes: int = 1) -> optuna.Study:
    spec = load_spec(str(sd.file))
    return Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape(nodes))).run(n_trials=n_trials).study


@pytest.fixture(scope="module")
def _local_study(tmp_path_factory: pytest.TempPathFactory) -> StudyDir:
    """One replayed study for the tests that only read it."""
    space = {"batch_size": {"choices": [8, 32, 64]}, "world_size": {"choices": [1, 2, 4]}}
    sd = make_study(tmp_path_factory.mktemp("plan") / "plan-local", "plan-local", search_space=space, trial=TRIAL,
                    **FIXED)
    replayed(sd, 9)
    return sd


@pytest.fixture
def local_study(_local_study: StudyDir, tmp_path: Path) -> StudyDir:
    """The module's study, copied into the test's own folder: a test may add to it."""
    return _local_study.copy_to(tmp_path / "plan-local")


def test_plan_predicts_more_ranks_on_one_node_with_an_interval(local_study: StudyDir) -> None:
    out = local_study.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "8", "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    best = payload["options"][0]
    assert (best["batch_size"], best["grad_accum"], best["config"]["world_size"]) == (64, 1, 8)
    truth = 8 * 64 / true_step(1, 8, 64)
    speed = best["throughput_samples_s"]
    assert speed["low"] <= truth <= speed["high"]
    assert abs(speed["value"] / truth - 1) < 0.05
    assert best["reach"] == "1 node(s), 8 rank(s): 2x the ranks measured (measured up to 1 node(s), 4 rank(s))"
    assert not best["inside_measured_scales"]
    text = local_study.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "8")
    assert text.returncode == 0, text.stderr
    assert "plan-local at 1 node(s) x 8 rank(s) per node (8 ranks), best by predicted throughput" in text.stdout
    assert "reach: 1 node(s), 8 rank(s): 2x the ranks measured" in text.stdout
    assert f"{speed['value']:,.0f}" in text.stdout


def test_plan_refuses_nodes_it_never_measured_naming_what_is_needed(local_study: StudyDir) -> None:
    # `autotune plan` as a process once: its exit status, stdout and stderr as a user's shell sees them
    out = local_study.autotune("plan", "study.yaml", "--nodes", "4", "--ranks-per-node", "4")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert "needs readings on more than one node to predict 4 nodes" in out.stderr
    assert "launcher.nodes 2 or more" in out.stderr


def test_plan_refuses_a_study_with_one_world_size(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("plan-one-size", search_space={"batch_size": {"choices": [8, 32]}}, trial=TRIAL, **FIXED)
    replayed(sd, 2)
    out = sd.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "4")
    assert out.returncode == 2
    assert out.stderr.strip().endswith(
        "the throughput model needs completed trials at 2 or more world sizes (measured: 1)"
    )
    assert out.stderr.startswith("error: ") and "study.yaml" in out.stderr


def test_plan_of_a_study_never_run_says_so(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("plan-empty", search_space={"batch_size": {"choices": [8, 32]}}, trial=TRIAL, **FIXED)
    out = sd.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "2")
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "no study named 'plan-empty'" in out.stderr and "first" in out.stderr


def test_calibration_plan_is_the_cli_plan(local_study: StudyDir) -> None:
    calibration = load_calibration(str(local_study.file))
    plan = calibration.plan(nodes=1, ranks_per_node=8)
    out = local_study.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "8", "--json")
    best = json.loads(out.stdout)["options"][0]
    assert plan.options[0].plan.batch_size == best["batch_size"]
    assert plan.options[0].plan.throughput.value == pytest.approx(best["throughput_samples_s"]["value"], rel=1e-9)
    with pytest.raises(UsageError, match="no study to plan from"):
        type(calibration).from_json(calibration.to_json()).plan(nodes=1, ranks_per_node=8)


def test_a_two_node_study_plans_sixteen_nodes_and_says_what_it_assumed(study_dir: Callable[..., StudyDir]) -> None:
    space = {"batch_size": {"choices": [8, 32, 64]}, "world_size": {"choices": [2, 4, 8]}}
    sd = study_dir(
        "plan-nodes",
        search_space=space,
        trial=TRIAL,
        launcher={"kind": "slurm", "nodes": 2},
        baseline={"world_size": 2},
        **FIXED,
    )
    replayed(sd, 9, nodes=2)
    out = sd.cli("plan", "study.yaml", "--nodes", "16", "--ranks-per-node", "4")
    assert out.returncode == 0, out.stderr
    assert "assumes the sync across nodes does not grow past 2 nodes" in out.stdout
    assert "16 node(s), 64 rank(s): 8x the ranks and 8x the nodes measured" in out.stdout
    payload = json.loads(sd.cli("plan", "study.yaml", "--nodes", "16", "--ranks-per-node", "4", "--json").stdout)
    best = payload["options"][0]
    truth = 64 * 64 / true_step(16, 64, 64)  # the truth's node sync does not grow either
    assert abs(best["throughput_samples_s"]["value"] / truth - 1) < 0.05


def test_a_network_profile_carries_the_sync_growth_a_two_node_study_cannot_see(
    study_dir: Callable[..., StudyDir],
) -> None:
    space = {"batch_size": {"choices": [8, 32, 64]}, "world_size": {"choices": [2, 4, 8]}}
    sd = study_dir("plan-profile", search_space=space, trial=TRIAL, launcher={"kind": "slurm", "nodes": 2},
                   baseline={"world_size": 2}, **FIXED)
    replayed(sd, 9, nodes=2)
    # The cluster's truth: past 2 nodes the sync across nodes is 0.8 + 0.2 x log2(N/2) times the 2-node sync
    # (x1.4 at 16 nodes); the study, on 2 nodes, cannot see it.
    def truth(batch: int) -> float:
        grad, sync = 0.01 + 0.001 * batch, 0.08 * (0.8 + 0.2 * 3)
        return 64 * batch / (grad**2 + sync**2) ** 0.5

    args = ["plan", "study.yaml", "--nodes", "16", "--ranks-per-node", "4"]
    given = sd.cli(*args, "--sync-growth", "0.8,0.2")
    assert given.returncode == 0, given.stderr
    assert "by the network profile (given): x1.00 at 4, x1.20 at 8, x1.40 at 16 nodes" in given.stdout
    assert "does not grow past 2 nodes" not in given.stdout
    with_profile = json.loads(sd.cli(*args, "--sync-growth", "0.8,0.2", "--json").stdout)["options"][0]
    without = json.loads(sd.cli(*args, "--json").stdout)["options"][0]
    # The profile scales the model's term for the sync across nodes (the 2-node readings' sync less what one
    # node's ranks explain), the landscape the whole 2-node sync: within 8%, where the flat sync is 23% over.
    assert abs(with_profile["throughput_samples_s"]["value"] / truth(with_profile["batch_size"]) - 1) < 0.08
    assert without["throughput_samples_s"]["value"] / truth(without["batch_size"]) > 1.15  # a flat sync: ~23% over
    calibration = load_calibration(str(sd.file))
    from autotune.scale import SyncGrowth

    python = calibration.plan(nodes=16, ranks_per_node=4, growth=SyncGrowth(0.8, 0.2)).options[0].plan
    assert python.throughput.value == pytest.approx(with_profile["throughput_samples_s"]["value"], rel=1e-9)
    for bad in ("0.8", "0.8,x", "0,0.2"):
        out = sd.cli(*args, "--sync-growth", bad)
        assert out.returncode == 2 and "--sync-growth" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_measured_noise_scale_ranks_by_goodput(local_study: StudyDir) -> None:
    """The hook for a gradient noise scale measured in trials: stored on them, it turns the ranking to goodput."""
    study = local_study.load()
    noise = 40.0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs: dict[str, Any] = {**t.user_attrs, NOISE_SCALE_ATTR: {"value": noise, "stderr": 4.0}}
        study.add_trial(
            optuna.trial.create_trial(
                state=t.state, values=t.values, params=t.params, distributions=t.distributions, user_attrs=attrs
            )
        )
    plan = load_calibration(str(local_study.file)).plan(nodes=1, ranks_per_node=8)
    best = plan.options[0].plan
    assert plan.noise_scale == noise
    assert best.global_batch < 8 * 64  # past the noise scale a larger batch is worth less per sample
    base = plan.options[0].config.base_batch_size  # the workload's
    assert best.efficiency == pytest.approx(efficiency(best.global_batch, noise, base))
    out = local_study.cli("plan", "study.yaml", "--nodes", "1", "--ranks-per-node", "8")
    assert "best by predicted goodput" in out.stdout and "gradient noise scale 40 samples" in out.stdout


def test_each_family_of_configurations_gets_its_own_fit(study_dir: Callable[..., StudyDir]) -> None:
    """Configurations that differ in another knob (here num_workers) are fitted apart and ranked: the faster
    family first, each option its family's own knobs with the planned batch."""
    space = {"batch_size": {"choices": [8, 64]}, "world_size": {"choices": [1, 2]}, "num_workers": {"choices": [0, 1]}}
    sd = study_dir("plan-families", search_space=space, trial=TRIAL, **FIXED)
    base = landscape(1)

    def faster_with_a_worker(config: TrialConfig, repeat: int) -> Measured:
        m = base(config, repeat)
        return Measured(m.throughput_samples_s * (1.2 if config.num_workers else 1.0))

    spec = load_spec(str(sd.file))
    Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(faster_with_a_worker)).run(n_trials=8)
    plan = load_calibration(str(sd.file)).plan(nodes=1, ranks_per_node=4)
    assert [o.config.num_workers for o in plan.options] == [1, 0]
    assert all(o.config.batch_size == 64 and o.config.world_size == 4 and not o.pooled for o in plan.options)
    assert plan.options[0].plan.throughput.value / plan.options[1].plan.throughput.value == pytest.approx(1.2, 0.02)
