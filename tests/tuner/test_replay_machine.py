"""The replayed drifting machine (autotune/tuner/_replay_drift.py): a window reads with the window noise, a paced
block with its own noise scaled by the block's length, as measured live."""

from __future__ import annotations

import math
import statistics

from autotune.tuner import Drift
from autotune.tuner._replay_drift import Machine


def _spread(readings: list[float]) -> float:
    return statistics.stdev(math.log(r) for r in readings)


def test_a_block_reads_with_the_block_noise_of_its_length_and_a_window_with_the_window_noise() -> None:
    machine = Machine(Drift(lambda t: 1.0, noise=0.03, seed=1, block_noise=0.1))
    windows = [machine.reading(1000.0) for _ in range(4000)]
    quarter = [machine.block_reading(1000.0, 250.0) for _ in range(4000)]  # 0.25 s at 1,000 samples/s
    two = [machine.block_reading(1000.0, 2000.0) for _ in range(4000)]  # 2 s
    assert abs(_spread(windows) - 0.03) < 0.003
    assert abs(_spread(quarter) - 0.1 * 0.25 ** -0.25) < 0.008  # 14%
    assert abs(_spread(two) - 0.1 * 2 ** -0.25) < 0.006  # 8.4%


def test_without_a_block_noise_a_block_reads_as_a_window_does() -> None:
    a = Machine(Drift(lambda t: 1.1, noise=0.03, seed=2))
    b = Machine(Drift(lambda t: 1.1, noise=0.03, seed=2))
    assert [a.block_reading(500.0, 100.0) for _ in range(5)] == [b.reading(500.0) for _ in range(5)]
