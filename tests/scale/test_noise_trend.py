"""The noise scale a run will reach, projected from its early readings (autotune.scale._trend)."""

from __future__ import annotations

import math

import pytest

from autotune.scale import project_noise_scale


def test_a_power_law_in_progress_is_recovered_at_the_horizon_and_the_first_reading_is_left_out() -> None:
    progress = [100.0, 200.0, 400.0, 800.0, 1600.0]
    noise = [50.0 * p**1.3 for p in progress]
    noise[0] = 0.01  # a first window read before the optimizer settled: left out, or the slope would be 3x
    projected = project_noise_scale(progress, noise, 16000.0)
    assert projected == pytest.approx(50.0 * 16000.0**1.3, rel=1e-9)


def test_a_falling_or_flat_trend_is_not_projected_below_the_readings() -> None:
    progress = [10.0, 20.0, 40.0, 80.0]
    falling = [900.0, 800.0, 400.0, 200.0]
    value = project_noise_scale(progress, falling, 10_000.0)
    assert 200.0 <= value <= 800.0  # the slope held at 0: the readings' geometric mean after the first
    assert value == pytest.approx(math.exp(sum(math.log(v) for v in falling[1:]) / 3))


def test_readings_over_a_narrow_span_give_the_last_value_unprojected() -> None:
    assert project_noise_scale([100.0, 120.0], [10.0, 40.0], 1e6) == 40.0
    assert project_noise_scale([100.0], [25.0], 1e6) == 25.0


def test_unusable_readings_and_a_bad_horizon_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="horizon"):
        project_noise_scale([1.0, 10.0], [1.0, 2.0], 0.0)
    with pytest.raises(ValueError, match="no noise-scale reading"):
        project_noise_scale([1.0, 10.0], [0.0, -1.0], 100.0)
