"""A cluster's network profile (SyncGrowth): fitted from workloads measured past two nodes, on synthetic readings
drawn from a known growth; a model given one predicts past its own two nodes; a model given none is unchanged."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

from autotune.scale import ScaleError, ScaleModel, ScaleParams, StepReading, SyncGrowth, fit_sync_growth
from tests.scale.test_throughput_model import TRUTH, readings

GROWTH = SyncGrowth(step=0.8, per_doubling=0.2)  # x0.8 at 3-4 nodes' start, x1.0 at 4, x1.2 at 8, x1.4 at 16
NODES = (1, 2, 3, 4, 8, 16)


def workload(
    size: float, gamma: float = 2.0, max_nodes: int = 16, noise: float = 0.0, growth: SyncGrowth = GROWTH
) -> list[StepReading]:
    """A workload whose gradient is ``size`` times TRUTH's (its sync takes ``size`` times as long), on a
    cluster whose sync across nodes grows by ``growth``."""
    p = dataclasses.replace(
        TRUTH, alpha_local=TRUTH.alpha_local * size, alpha_node=TRUTH.alpha_node * size, beta_node=0.0, gamma=gamma
    )
    rng = np.random.default_rng(int(size * 100))
    out = []
    for nodes in (n for n in NODES if n <= max_nodes):
        for per_node in (1, 2, 4):
            for batch in (8, 16, 32, 64):
                step = true_step(p, nodes, nodes * per_node, batch, growth) * float(np.exp(rng.normal(0, noise)))
                out.append(StepReading(nodes, nodes * per_node, batch, 1, step))
    return out


def true_step(p: ScaleParams, nodes: int, ranks: int, batch: int, growth: SyncGrowth = GROWTH) -> float:
    grad = p.alpha_grad + p.beta_grad * batch
    if ranks == 1:
        sync = 0.0
    elif nodes == 1:
        sync = p.alpha_local + p.beta_local * (ranks - 2)
    else:
        sync = p.alpha_node * float(growth.factor(nodes))
    return float((grad**p.gamma + sync**p.gamma) ** (1 / p.gamma))


def test_the_profile_fitted_on_workloads_with_a_known_growth_recovers_it() -> None:
    profile = fit_sync_growth([workload(0.5), workload(3.0, gamma=1.5)])
    assert profile.step == pytest.approx(GROWTH.step, rel=0.02)
    assert profile.per_doubling == pytest.approx(GROWTH.per_doubling, rel=0.05)
    assert len(profile.members) == 2  # each workload's own growth, kept for the interval
    for step, per_doubling in profile.members:
        assert (step, per_doubling) == pytest.approx((GROWTH.step, GROWTH.per_doubling), rel=0.05)
    assert float(profile.factor(8)) == pytest.approx(1.2, rel=0.02)
    assert float(profile.factor(2)) == 1.0 and float(profile.factor(1)) == 1.0


def test_a_model_given_the_profile_predicts_a_known_8_node_row_it_never_measured() -> None:
    profile = fit_sync_growth([workload(0.5), workload(3.0, gamma=1.5)])
    own = workload(1.5, max_nodes=2)  # another gradient size, calibrated on two nodes only
    p = dataclasses.replace(TRUTH, alpha_local=TRUTH.alpha_local * 1.5, alpha_node=TRUTH.alpha_node * 1.5)
    truth = 8 * 4 * 8 / true_step(p, 8, 32, 8)
    with_profile = ScaleModel.fit(own, bootstrap=0, growth=profile).throughput(8, 32, 8)
    alone = ScaleModel.fit(own, bootstrap=0).throughput(8, 32, 8)
    assert with_profile.value == pytest.approx(truth, rel=0.01)
    assert alone.value > truth * 1.05  # without it the sync is held at its 2-node time: too fast
    model = ScaleModel.fit(own, bootstrap=0, growth=profile)
    assert model.growth is not None and model.growth.sync_s is not None  # weighed by its own sync at 2 nodes
    assert model.assumptions() == [model.growth.describe()]
    assert "x1.20 at 8" in model.growth.describe() and "fitted on 2 workload(s)" in model.growth.describe()
    assert "nearest this one's" in model.growth.describe()


def test_a_fitted_profile_carries_its_workloads_spread_into_the_interval() -> None:
    spread = fit_sync_growth([workload(0.5), workload(3.0, gamma=1.5)])
    # two workloads that disagree (no seconds: their growth is not weighed, only their spread carried)
    spread = dataclasses.replace(spread, members=((0.6, 0.1), (1.0, 0.3)), member_sync_s=())
    given = SyncGrowth(spread.step, spread.per_doubling)
    own = workload(1.5, max_nodes=2, noise=0.01)
    wide = ScaleModel.fit(own, bootstrap=40, growth=spread).throughput(8, 32, 64)
    narrow = ScaleModel.fit(own, bootstrap=40, growth=given).throughput(8, 32, 64)
    assert wide.value == pytest.approx(narrow.value)
    assert (wide.high - wide.low) > 2 * (narrow.high - narrow.low)


def test_the_growth_per_doubling_follows_the_members_whose_sync_is_nearest_in_seconds() -> None:
    """A latency-bound small sync grows fast past 2 nodes, a bandwidth-bound large one slowly: a workload with a
    large sync takes the large member's growth, not the members' mean."""
    fast, slow = SyncGrowth(step=0.8, per_doubling=0.3), SyncGrowth(step=0.8, per_doubling=0.05)
    profile = fit_sync_growth([workload(0.2, growth=fast), workload(5.0, growth=slow)])
    assert [d for _, d in profile.members] == pytest.approx([0.3, 0.05], rel=0.05)
    assert profile.member_sync_s[0] < profile.member_sync_s[1] / 10
    assert profile.per_doubling == pytest.approx(0.175, rel=0.05)  # the mean, as fitted
    p = dataclasses.replace(TRUTH, alpha_local=TRUTH.alpha_local * 4, alpha_node=TRUTH.alpha_node * 4)
    truth = 16 * 4 * 8 / true_step(p, 16, 64, 8, slow)
    own = workload(4.0, max_nodes=2, growth=slow)
    model = ScaleModel.fit(own, bootstrap=0, growth=profile)
    assert model.growth is not None and model.growth.per_doubling == pytest.approx(0.05, abs=0.01)
    assert model.growth.step == profile.step and profile.width == 1.0  # the step stays the mean
    assert model.throughput(16, 64, 8).value == pytest.approx(truth, rel=0.02)
    mean = ScaleModel.fit(own, bootstrap=0, growth=dataclasses.replace(profile, width=1e6))  # every member alike
    assert mean.throughput(16, 64, 8).value < truth * 0.95
    small = ScaleModel.fit(workload(0.25, max_nodes=2, growth=fast), bootstrap=0, growth=profile)
    assert small.growth is not None and small.growth.per_doubling == pytest.approx(0.3, abs=0.02)
    given = SyncGrowth(0.8, 0.2)  # numbers, no members: used as given
    assert ScaleModel.fit(own, bootstrap=0, growth=given).growth == given


def test_without_a_profile_the_predictions_are_what_they_were() -> None:
    """The numbers the model gave before profiles existed (same readings, same seed, same refits)."""
    model = ScaleModel.fit([r for r in readings(noise=0.03, seed=1) if r.nodes <= 2], bootstrap=20)
    before = {
        (8, 32, 32, 1): (6535.996377005075, 6349.7228293639255, 6716.907558456694),
        (1, 4, 16, 2): (754.1990430273745, 739.410826497426, 774.7912444184574),
        (2, 6, 64, 1): (1364.7545266566276, 1331.657531779281, 1400.9011041256433),
    }
    for placement, want in before.items():
        got = model.throughput(*placement)
        assert (got.value, got.low, got.high) == pytest.approx(want, rel=1e-9), placement
    assert model.growth is None
    assert model.assumptions() == ["the sync across nodes does not grow past 2 nodes (no readings on 3+ nodes)"]


def test_a_profile_leaves_one_and_two_nodes_alone() -> None:
    own = [r for r in readings(noise=0.03, seed=1) if r.nodes <= 2]
    alone = ScaleModel.fit(own, bootstrap=0)
    with_profile = ScaleModel.fit(own, bootstrap=0, growth=GROWTH)
    for placement in ((1, 4, 16), (2, 8, 32)):
        assert with_profile.throughput(*placement).value == pytest.approx(alone.throughput(*placement).value)
    assert with_profile.throughput(16, 64, 32).value < alone.throughput(16, 64, 32).value


def test_a_profile_that_cannot_be_fitted_or_is_not_a_ratio_is_refused() -> None:
    with pytest.raises(ScaleError, match=r"workload 1 of the network profile needs readings on 2 nodes and on 3\+"):
        fit_sync_growth([workload(0.5), workload(1.0, max_nodes=2)])
    with pytest.raises(ScaleError, match="one or more workloads"):
        fit_sync_growth([])
    with pytest.raises(ValueError, match=r"SyncGrowth\.step is 0\.0: .* > 0"):
        SyncGrowth(step=0.0, per_doubling=0.1)
    with pytest.raises(ValueError, match=r"SyncGrowth\.per_doubling is nan"):
        SyncGrowth(step=1.0, per_doubling=float("nan"))
    with pytest.raises(ValueError, match=r"SyncGrowth\.width is 0: give a width > 0"):
        SyncGrowth(step=1.0, per_doubling=0.1, width=0)
    with pytest.raises(ValueError, match=r"member_sync_s has 1 values for 2 members"):
        SyncGrowth(step=1.0, per_doubling=0.1, members=((1.0, 0.1), (1.0, 0.2)), member_sync_s=(0.5,))


def test_a_fitted_profile_is_its_workloads_mean() -> None:
    profile = fit_sync_growth([workload(0.5, noise=0.02), workload(3.0, gamma=1.5, noise=0.02)])
    assert profile.members[0] != profile.members[1]
    assert (profile.step, profile.per_doubling) == pytest.approx(tuple(np.mean(profile.members, axis=0)))


TRACES = Path("/work/shared/data/pollux-traces")


@pytest.mark.slow  # 2-4 s at load 9, more under a heavier one
@pytest.mark.skipif(not TRACES.is_dir(), reason="the Pollux traces are not on this machine")
def test_on_the_pollux_traces_the_profile_brings_every_job_to_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/design/measurements.md's figure: part (a) of benchmarks/pollux_traces.py, leave-one-job-out, 6 of 6
    jobs with the profile (5 with every member weighing alike) and 2 without (the medians and 90th percentiles
    need no bootstrap)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    pollux = importlib.import_module("pollux_traces")
    everyone = [pollux.Job.load(TRACES / name) for name in pollux.JOBS]
    results = [pollux.prediction(job, 0, pollux.network_profile(job, everyone))[0] for job in everyone]
    assert sum(a["met"] for a in results) == 2
    assert sum(a["profile_met"] for a in results) == 6
    assert sum(a["profile_width"]["1000000.0"]["met"] for a in results) == 5
