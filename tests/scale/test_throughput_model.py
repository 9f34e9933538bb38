"""The throughput model over scale, on synthetic readings drawn from a known truth."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.scale import (
    ScaleError,
    ScaleModel,
    ScaleParams,
    StepReading,
    efficiency,
    noise_scale,
    plan_scale,
    reach,
)

TRUTH = ScaleParams(
    alpha_grad=0.02, beta_grad=0.004, alpha_local=0.01, beta_local=0.003, alpha_node=0.05, beta_node=0.01, gamma=2.0
)


def true_step(nodes: int, ranks: int, batch: int, accum: int = 1, p: ScaleParams = TRUTH) -> float:
    grad = p.alpha_grad + p.beta_grad * batch
    if ranks == 1:
        sync = 0.0
    elif nodes == 1:
        sync = p.alpha_local + p.beta_local * (ranks - 2)
    else:
        sync = p.alpha_node + p.beta_node * (nodes - 2)
    return (accum - 1) * grad + (grad**p.gamma + sync**p.gamma) ** (1 / p.gamma)


def readings(noise: float = 0.0, seed: int = 0, max_nodes: int = 3) -> list[StepReading]:
    rng = np.random.default_rng(seed)
    out = []
    for nodes in range(1, max_nodes + 1):
        for per_node in (1, 2, 4):
            for batch in (8, 16, 32, 64):
                for accum in (1, 2):
                    step = true_step(nodes, nodes * per_node, batch, accum) * float(np.exp(rng.normal(0, noise)))
                    out.append(StepReading(nodes, nodes * per_node, batch, accum, step))
    return out


def test_recovers_the_parameters_from_exact_readings() -> None:
    model = ScaleModel.fit(readings(), bootstrap=0)
    got, want = model.params.as_array(), TRUTH.as_array()
    assert np.allclose(got, want, rtol=0.02, atol=1e-4), (got, want)


def test_predicts_an_unmeasured_scale_within_its_interval() -> None:
    model = ScaleModel.fit(readings(noise=0.03, seed=1), bootstrap=60)
    for nodes, per_node, batch in ((6, 4, 32), (1, 8, 16), (3, 8, 64)):
        truth = nodes * per_node * batch / true_step(nodes, nodes * per_node, batch)
        speed = model.throughput(nodes, nodes * per_node, batch)
        assert speed.low <= truth <= speed.high, (nodes, per_node, batch, speed, truth)
        assert abs(speed.value / truth - 1) < 0.05
        assert speed.low < speed.value < speed.high


def test_more_noise_gives_wider_intervals() -> None:
    quiet = ScaleModel.fit(readings(noise=0.01, seed=2), bootstrap=25).throughput(4, 16, 32)
    loud = ScaleModel.fit(readings(noise=0.10, seed=2), bootstrap=25).throughput(4, 16, 32)
    assert (loud.high - loud.low) / loud.value > 2 * (quiet.high - quiet.low) / quiet.value


def test_too_few_scales_name_what_is_needed() -> None:
    one_size = [r for r in readings() if r.ranks == 1]
    with pytest.raises(ScaleError, match=r"2 or more world sizes \(measured: 1\)"):
        ScaleModel.fit(one_size)
    one_batch = [r for r in readings() if r.batch_size == 16]
    with pytest.raises(ScaleError, match=r"2 or more per-rank batch sizes \(measured: 16\)"):
        ScaleModel.fit(one_batch)


def test_a_term_never_measured_is_refused_not_guessed() -> None:
    single_node = ScaleModel.fit([r for r in readings() if r.nodes == 1], bootstrap=0)
    assert single_node.throughput(1, 16, 32).value > 0  # more ranks on one node: the local sync's growth
    with pytest.raises(ScaleError, match="readings on more than one node"):
        single_node.throughput(4, 16, 32)
    two_nodes = ScaleModel.fit([r for r in readings() if r.nodes <= 2], bootstrap=0)
    assert two_nodes.assumptions() == ["the sync across nodes does not grow past 2 nodes (no readings on 3+ nodes)"]


def test_plan_prefers_throughput_without_a_noise_scale_and_goodput_with_one() -> None:
    model = ScaleModel.fit(readings(), bootstrap=0)
    by_speed = plan_scale(model, 4, 4, [8, 16, 32, 64])
    assert by_speed[0].batch_size == 64  # the largest batch amortises the sync best
    by_goodput = plan_scale(model, 4, 4, [8, 16, 32, 64], noise=64.0, base_batch=8)
    assert by_goodput[0].batch_size < 64
    best = by_goodput[0]
    assert best.efficiency == pytest.approx(efficiency(best.global_batch, 64.0, 8))
    assert best.goodput is not None and best.goodput.value == pytest.approx(best.throughput.value * best.efficiency)


def test_plan_keeps_a_global_batch() -> None:
    model = ScaleModel.fit(readings(), bootstrap=0)
    plans = plan_scale(model, 2, 4, [8, 16, 32], global_batch=512)
    assert {(p.batch_size, p.grad_accum) for p in plans} == {(8, 8), (16, 4), (32, 2)}
    assert all(p.global_batch == 512 for p in plans)
    with pytest.raises(ScaleError, match="no split of global batch 100 over 8 ranks"):
        plan_scale(model, 2, 4, [8, 16, 32], global_batch=100)


def test_efficiency_and_noise_scale() -> None:
    assert efficiency(128, 1000.0, 128) == 1.0
    assert efficiency(1128, 1000.0, 128) == pytest.approx(1128 / 2128)
    assert noise_scale(grad_sqr=2.0, grad_var=4.0, batch=32) == 64.0
    with pytest.raises(ValueError, match="not gradient statistics"):
        noise_scale(0.0, 1.0, 32)


def test_reach_says_how_far_past_the_readings() -> None:
    model = ScaleModel.fit([r for r in readings() if r.nodes <= 2], bootstrap=0)
    assert reach(model, 2, 2).inside
    text = reach(model, 16, 4).describe()
    assert (
        text == "16 node(s), 64 rank(s): 8x the ranks and 8x the nodes measured (measured up to 2 node(s), 8 rank(s))"
    )
