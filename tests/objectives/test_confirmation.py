"""Confirmation statistics: grouping repeated measurements, choosing the best group (docs/storage.md)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.objectives import Group, Measurement, choose_best, config_key, group_measurements
from autotune.search_space import TrialConfig

A = TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=64).model_dump(mode="json")
B = TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=128, amp="bf16").model_dump(mode="json")
KA, KB = config_key(A), config_key(B)

RECORDS = [
    (3, KA, A, 100.0, 500.0, 2.0),
    (7, KB, B, 150.0, 700.0, None),
    (5, KA, A, 110.0, None, 2.2),
    (9, KA, A, 90.0, 520.0, 2.4),
    (8, KB, B, 165.0, 720.0, None),
]


def test_groups_by_config_key_in_first_measured_order() -> None:
    groups = group_measurements(RECORDS)
    assert [g.config_key for g in groups] == [KA, KB]
    a, b = groups
    assert a.trials == (3, 5, 9)
    assert a.values == (100.0, 110.0, 90.0)
    assert b.trials == (7, 8)
    assert a.config == A


def test_group_statistics() -> None:
    a, b = group_measurements(RECORDS)
    assert a.median == 100.0
    assert a.spread == pytest.approx((110.0 - 90.0) / 100.0)
    assert a.peak_memory_mb == 510.0  # median of the known 500 and 520
    assert a.loss == 2.2
    assert b.median == 157.5
    assert b.spread == pytest.approx(15.0 / 157.5)
    assert b.peak_memory_mb == 710.0
    assert b.loss is None


def test_trial_order_not_record_order_decides() -> None:
    groups = group_measurements(list(reversed(RECORDS)))
    assert [g.config_key for g in groups] == [KA, KB]  # KA was measured first, by trial 3
    assert [g.trials for g in groups] == [(3, 5, 9), (7, 8)]
    assert groups[0].values == (100.0, 110.0, 90.0)


def test_a_group_keeps_the_first_trials_config() -> None:
    # equal knobs, derived values formatted differently: one group, the earliest trial's config
    later = dict(A, lr=0.00100000001)
    (group,) = group_measurements([(6, KA, later, 1.0, None, None), (2, KA, A, 1.0, None, None)])
    assert group.config == A


def test_one_measurement_has_no_spread() -> None:
    (group,) = group_measurements([(1, KA, A, 42.0, None, None)])
    assert (group.median, group.spread, group.peak_memory_mb, group.loss) == (42.0, 0.0, None, None)


def test_records_may_be_measurements() -> None:
    record = Measurement(trial_number=1, config_key=KA, config=A, value=1.0, peak_memory_mb=2.0, loss=3.0)
    assert group_measurements([record]) == group_measurements([(1, KA, A, 1.0, 2.0, 3.0)])


def test_a_non_finite_value_is_refused() -> None:
    with pytest.raises(ValueError, match="trial 4: value nan"):
        group_measurements([(4, KA, A, math.nan, None, None)])


# A's log values (100, 110, 90) and B's (150, 165), each about its own mean, pooled over 2 + 1 degrees of
# freedom: t(3) s / sqrt(3) for A's three measurements.
_SQUARES = sum((math.log(v) - sum(map(math.log, g)) / len(g)) ** 2 for g in ((100, 110, 90), (150, 165)) for v in g)
POOLED_A = 3.182 * math.sqrt(_SQUARES / 3) / math.sqrt(3)


def test_to_json_is_the_group_of_storage_md() -> None:
    a, _ = group_measurements(RECORDS)
    data = a.to_json()
    assert data == {
        "config_key": KA,
        "config": A,
        "trials": [3, 5, 9],
        "values": [100.0, 110.0, 90.0],
        "median": 100.0,
        "spread": pytest.approx(0.2),
        "peak_memory_mb": 510.0,
        "loss": 2.2,
        "half_width": pytest.approx(POOLED_A, rel=1e-6),
    }
    assert list(data) == ["config_key", "config", "trials", "values", "median", "spread", "peak_memory_mb", "loss",
                          "half_width"]
    assert json.loads(json.dumps(data)) == data  # plain JSON, as Optuna stores user attributes


def test_from_json_reads_back_to_json() -> None:
    for group in group_measurements(RECORDS):
        assert Group.from_json(json.loads(json.dumps(group.to_json()))) == group


def group(key: str, values: list[float]) -> Group:
    (g,) = group_measurements([(i, key, {}, v, None, None) for i, v in enumerate(values)])
    return g


def test_choose_best_follows_the_direction() -> None:
    groups = group_measurements(RECORDS)
    assert choose_best(groups, "maximize").config_key == KB
    assert choose_best(groups, "minimize").config_key == KA


def test_choose_best_ties_go_to_the_lower_spread_then_more_measurements() -> None:
    wide = group("wide", [80.0, 100.0, 120.0])
    narrow = group("narrow", [99.0, 100.0, 101.0])
    assert choose_best([wide, narrow], "maximize").config_key == "narrow"
    once = group("once", [100.0])
    thrice = group("thrice", [100.0, 100.0, 100.0])
    assert choose_best([once, thrice], "maximize").config_key == "thrice"
    assert choose_best([thrice, once], "minimize").config_key == "thrice"
    # spread before count: one steady measurement beats three noisy ones at the same median
    assert choose_best([wide, once], "maximize").config_key == "once"


def test_choose_best_refuses_nothing_and_bad_directions() -> None:
    with pytest.raises(ValueError, match="no groups"):
        choose_best([], "maximize")
    with pytest.raises(ValueError, match="'best'"):
        choose_best(group_measurements(RECORDS), "best")


records_st = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.floats(1.0, 1e4),
        st.none() | st.floats(1.0, 1e4),
    ),
    min_size=1,
    max_size=20,
)


def as_records(drawn: list[tuple[str, float, float | None]]) -> list[tuple[int, str, dict[str, Any], float, Any, Any]]:
    return [(n, key, {"k": key}, v, mem, None) for n, (key, v, mem) in enumerate(drawn)]


@given(records_st)
def test_groups_partition_the_measurements(drawn: list[tuple[str, float, float | None]]) -> None:
    records = as_records(drawn)
    groups = group_measurements(records)
    assert sorted(t for g in groups for t in g.trials) == list(range(len(records)))
    for g in groups:
        assert len(g.trials) == len(g.values)
        assert all(
            records[t][1] == g.config_key and records[t][3] == v for t, v in zip(g.trials, g.values, strict=True)
        )
        assert min(g.values) <= g.median <= max(g.values)
        assert g.spread >= 0
        assert (g.spread == 0) == (len(set(g.values)) == 1)


@given(records_st, st.sampled_from(["maximize", "minimize"]))
def test_the_best_group_has_the_best_median(drawn: list[tuple[str, float, float | None]], direction: str) -> None:
    groups = group_measurements(as_records(drawn))
    best = choose_best(groups, direction)
    medians = [g.median for g in groups]
    assert best.median == (max(medians) if direction == "maximize" else min(medians))
