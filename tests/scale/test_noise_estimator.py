"""The gradient noise scale estimator (McCandlish et al. 2018, appendix A) on synthetic gradients whose noise
scale is known: no ranks, no timing."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.scale import NoiseWindow, estimate_noise_scale, signal_and_noise

DIM, SIGMA = 64, 1.0


def _windows(true_noise: float, ranks: int, per_rank: int, windows: int, steps: int, seed: int) -> list[NoiseWindow]:
    """Each step: every rank's mean gradient over ``per_rank`` samples (G plus noise of variance
    sigma^2 / per_rank a coordinate) and their mean, the all-reduced gradient of ``ranks x per_rank`` samples."""
    rng = np.random.default_rng(seed)
    grad = np.full(DIM, np.sqrt(DIM * SIGMA**2 / true_noise / DIM))  # |G|^2 = tr(Sigma) / B_noise
    out = []
    for _ in range(windows):
        small, big = [], []
        for _ in range(steps):
            local = grad + rng.normal(0.0, SIGMA / np.sqrt(per_rank), size=(ranks, DIM))
            small.append(float((local**2).sum(1).mean()))
            big.append(float((local.mean(0) ** 2).sum()))
        out.append(NoiseWindow(steps, float(np.mean(small)), float(np.mean(big))))
    return out


def test_expected_norms_give_the_exact_signal_and_noise() -> None:
    # E|g_b|^2 = |G|^2 + tr(Sigma) / b
    grad_sqr, trace = signal_and_noise(8, 32, 2.0 + 64.0 / 8, 2.0 + 64.0 / 32)
    assert grad_sqr == pytest.approx(2.0) and trace == pytest.approx(64.0)


@pytest.mark.parametrize(("true_noise", "ranks", "per_rank"), [(32.0, 2, 8), (200.0, 4, 16), (4.0, 2, 64)])
def test_the_pooled_estimate_finds_a_known_noise_scale_inside_its_interval(
    true_noise: float, ranks: int, per_rank: int
) -> None:
    estimate = estimate_noise_scale(per_rank, ranks * per_rank, _windows(true_noise, ranks, per_rank, 10, 8, seed=1))
    assert estimate is not None and estimate.value is not None
    assert estimate.low is not None and estimate.high is not None
    assert estimate.low < true_noise < estimate.high
    assert estimate.value == pytest.approx(true_noise, rel=0.3)
    assert (estimate.steps, estimate.windows) == (80, 10)


def test_the_interval_covers_the_truth_in_most_seeded_runs() -> None:
    covered = 0
    for seed in range(40):
        e = estimate_noise_scale(8, 16, _windows(32.0, 2, 8, 8, 5, seed=seed))
        assert e is not None
        covered += e.low is not None and e.high is not None and e.low <= 32.0 <= e.high
    assert covered >= 32  # a 95% interval: about 38 of 40


def test_numerator_and_denominator_are_pooled_over_windows_not_the_ratio() -> None:
    windows = [NoiseWindow(1, 10.0, 6.0), NoiseWindow(3, 7.0, 6.5)]
    pooled_small, pooled_big = (10.0 + 3 * 7.0) / 4, (6.0 + 3 * 6.5) / 4
    grad_sqr, trace = signal_and_noise(8, 16, pooled_small, pooled_big)
    estimate = estimate_noise_scale(8, 16, windows)
    assert estimate is not None and estimate.value == pytest.approx(trace / grad_sqr)


def test_no_value_when_the_norms_do_not_resolve_it_and_no_interval_from_one_window() -> None:
    assert estimate_noise_scale(8, 16, []) is None
    unresolved = estimate_noise_scale(8, 16, [NoiseWindow(4, 5.0, 5.5), NoiseWindow(4, 5.0, 5.2)])  # small < big
    assert unresolved is not None and unresolved.value is None and unresolved.low is None
    one = estimate_noise_scale(8, 16, [NoiseWindow(4, 10.0, 6.0)])
    assert one is not None and one.value == pytest.approx(64.0 / 2.0)  # tr(Sigma) 64, |G|^2 2
    assert one.low is None and one.high is None
    with pytest.raises(ValueError, match="two batch sizes"):
        signal_and_noise(16, 16, 1.0, 1.0)
