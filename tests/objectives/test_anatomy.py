"""The diagnosis read from step anatomies: which bottleneck binds, and which changed knobs act on it."""

from __future__ import annotations

import pytest

from autotune.knobs import COMPUTE, INPUT, KNOBS, SYNC
from autotune.objectives import KNOB_BOTTLENECKS, binding, bottleneck_shares, diagnose, median_anatomy
from autotune.trial_result import StepAnatomy


def _anatomy(data: float, compute: float, sync: float | None, step: float) -> StepAnatomy:
    return StepAnatomy.of(step, data, compute, sync, 0.001)


def test_every_knob_of_the_table_says_which_bottleneck_it_acts_on() -> None:
    assert set(KNOB_BOTTLENECKS) == set(KNOBS)
    # a row without bottlenecks= is a knob the diagnosis can never name; only the learning rate's rule is such
    assert [name for name, parts in KNOB_BOTTLENECKS.items() if not parts] == ["lr_scaling"]
    assert {part for parts in KNOB_BOTTLENECKS.values() for part in parts} == {INPUT, COMPUTE, SYNC}


def test_other_is_what_the_timed_parts_leave_of_the_step_and_the_share_is_of_the_step() -> None:
    a = _anatomy(0.06, 0.03, 0.0, 0.1)
    assert a.other_s == pytest.approx(0.009) and a.step_s == pytest.approx(0.1)
    assert a.data_wait_share == pytest.approx(0.6)
    # parts that overrun the step (clocks read apart) leave no negative rest
    over = _anatomy(0.06, 0.05, 0.0, 0.1)
    assert over.other_s == 0.0 and over.data_wait_share == pytest.approx(0.06 / 0.111, abs=1e-4)


def test_the_largest_bottleneck_binds() -> None:
    assert binding(_anatomy(0.06, 0.03, 0.0, 0.1)) == "input pipeline"
    assert binding(_anatomy(0.01, 0.03, 0.05, 0.1)) == "gradient synchronisation"
    shares = bottleneck_shares(_anatomy(0.01, 0.05, None, 0.1))
    assert shares["computation"] == pytest.approx(0.51) and shares["gradient synchronisation"] == 0.0


def test_the_diagnosis_names_both_bottlenecks_and_the_knobs_that_moved_the_baselines() -> None:
    base = _anatomy(0.061, 0.03, 0.0, 0.1)
    chosen = _anatomy(0.002, 0.045, 0.0, 0.05)
    d = diagnose(base, chosen, {"num_workers": 0, "batch_size": 32, "bucket_cap_mb": 25},
                 {"num_workers": 2, "batch_size": 32, "bucket_cap_mb": 50})
    assert d is not None
    assert (d.baseline_binds, d.chosen_binds) == ("input pipeline", "computation")
    assert d.moved_by == ("num_workers",)  # bucket_cap_mb changed too, but acts on the synchronisation
    assert d.line() == (
        "step anatomy: the baseline spent 61% of a step waiting for data; the chosen configuration 4%. The baseline "
        "is bound by its input pipeline (61% of a step), the chosen configuration by its computation (92%); moved by "
        "num_workers 0->2"
    )
    assert diagnose(None, chosen, {}, {}) is None
    same = diagnose(base, base, {"num_workers": 0}, {"num_workers": 0})
    assert same is not None and same.line().endswith("; the same configuration")



def test_a_choice_still_waiting_with_every_core_busy_is_said_to_need_cores_not_workers() -> None:
    # studies/images.yaml on 2 cores: the choice (1 rank, 2 workers) still waited 39% of a step, bound by its
    # computation: loading and training share both cores, and more workers cannot feed it faster there.
    base, chosen = _anatomy(0.056, 0.011, 0.0, 0.068), _anatomy(0.057, 0.088, 0.0, 0.146)
    configs = {"num_workers": 0, "world_size": 1}, {"num_workers": 2, "world_size": 1}
    d = diagnose(base, chosen, *configs, cores=2)
    assert d is not None and d.line().endswith(
        "moved by num_workers 0->2. It still waits 39% of a step with 1 rank and 2 DataLoader workers on 2 cores: "
        "loading and training share every core, so more workers cannot feed it faster here; more cores or cheaper "
        "loading would"
    )
    # cores to spare (4 for 3 processes), an unknown machine, or a choice that hardly waits: nothing added
    for cores, anatomy in ((4, chosen), (None, chosen), (2, _anatomy(0.01, 0.088, 0.0, 0.1))):
        again = diagnose(base, anatomy, *configs, cores=cores)
        assert again is not None and again.line().endswith("moved by num_workers 0->2")
    # two nodes of 4 ranks each, 1 worker a rank, on 8 cores a node: 8 processes a node fill them
    two_nodes = diagnose(base, chosen, {"num_workers": 0, "world_size": 8}, {"num_workers": 1, "world_size": 8},
                         cores=8, nodes=2)
    assert two_nodes is not None and "with 4 ranks and 4 DataLoader workers on 8 cores a node:" in two_nodes.line()

def test_median_anatomy_is_per_part_and_keeps_an_unseparated_sync_unknown() -> None:
    m = median_anatomy([_anatomy(0.01, 0.02, 0.0, 0.05), _anatomy(0.03, 0.02, 0.0, 0.05),
                        _anatomy(0.02, 0.04, 0.0, 0.07)])
    assert m is not None and m.data_wait_s == pytest.approx(0.02) and m.forward_backward_s == pytest.approx(0.02)
    assert median_anatomy([_anatomy(0.01, 0.02, None, 0.05)]).sync_exposed_s is None  # type: ignore[union-attr]
    assert median_anatomy([]) is None
