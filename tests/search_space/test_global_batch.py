"""A held global batch (constraints.global_batch) in the search space: its feasible splits, the one Optuna param
(batch_split) they become, the baseline's split, and one learning rate in every configuration."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.samplers import grid_points
from autotune.search_space import SPLIT_PARAM, BatchSplit, SearchSpace
from autotune.search_space._split import NoFeasibleSplit, feasible_splits
from autotune.spec import IntRange, SearchSpaceSpec

BASE_LR = 1e-3


def space(search: dict[str, Any], held: tuple[int, ...], base_batch_size: int = 64) -> SearchSpace:
    return SearchSpace.build(
        SearchSpaceSpec.model_validate(search), base_lr=BASE_LR, base_batch_size=base_batch_size, global_batch=held
    )


QUICK = {"batch_size": {"low": 16, "high": 256, "log": True}, "grad_accum": {"choices": [1, 2, 4]},
         "world_size": {"choices": [1, 2]}, "num_workers": {"low": 0, "high": 2}, "lr_scaling": "sqrt"}


def test_the_feasible_splits_in_order_of_preference() -> None:
    s = space(QUICK, (256,))
    assert [x.label for x in s.splits] == ["256x1x1", "128x2x1", "64x4x1", "128x1x2", "64x2x2", "32x4x2"]
    assert all(x.global_batch == 256 for x in s.splits)
    # the three knobs are one categorical param; the others are searched as before
    assert s.searched() == ["num_workers"] and s.split_searched()
    dists = s.distributions()
    assert set(dists) == {"num_workers", SPLIT_PARAM}
    assert isinstance(dists[SPLIT_PARAM], optuna.distributions.CategoricalDistribution)
    assert list(dists[SPLIT_PARAM].choices) == [x.label for x in s.splits]
    assert grid_points(s)[SPLIT_PARAM] == [x.label for x in s.splits]  # the grid sampler walks every split


def test_several_global_batches_list_the_first_ones_splits_first() -> None:
    s = space(QUICK, (64, 256))
    assert [x.global_batch for x in s.splits] == [64] * 5 + [256] * 6  # 8x4x2 is below batch_size 16
    assert s.default_config().global_batch == 64


def test_the_baseline_is_the_first_split_unless_the_baseline_section_picks_another() -> None:
    s = space(QUICK, (256,))
    base = s.default_config()
    assert (base.batch_size, base.grad_accum, base.world_size) == (256, 1, 1)  # one rank, no accumulation
    picked = s.default_config({"batch_size": 64})
    assert (picked.batch_size, picked.grad_accum, picked.world_size) == (64, 4, 1)
    picked = s.default_config({"world_size": 2, "num_workers": 1})
    assert (picked.batch_size, picked.grad_accum, picked.world_size, picked.num_workers) == (128, 1, 2, 1)
    with pytest.raises(ValueError, match=r"batch_size 48 is no split of the held global batch 256 .*256x1x1"):
        s.default_config({"batch_size": 48})
    with pytest.raises(ValueError, match="no split"):
        s.config({"batch_size": 64, "grad_accum": 1, "world_size": 1})  # --set values that make 64


def test_one_learning_rate_whatever_the_split_and_lr_scaling_is_said_to_be_overridden() -> None:
    s = space(QUICK, (256, 512))
    assert s.knobs["lr_scaling"].model_dump() == {"value": "none"}
    assert any("lr_scaling: not applied" in n and "constraints.global_batch" in n for n in s.notes)
    configs = [s.suggest(optuna.trial.FixedTrial({SPLIT_PARAM: x.label, "num_workers": 0})) for x in s.splits]
    configs.append(s.default_config({"lr_scaling": "linear"}))  # the baseline: section cannot bring it back
    assert {c.lr for c in configs} == {BASE_LR}
    assert {c.global_batch for c in configs} == {256, 512}
    # without a held global batch the same space scales lr with the batch (sqrt)
    free = space(QUICK, ())
    assert free.default_config({"batch_size": 256}).lr == pytest.approx(BASE_LR * 2)
    assert not any("lr_scaling" in n for n in free.notes)
    assert not any("lr_scaling" in n for n in space({**QUICK, "lr_scaling": "none"}, (256,)).notes)


def test_params_round_trip_and_contains() -> None:
    s = space(QUICK, (256,))
    for split in s.splits:
        config = s.suggest(optuna.trial.FixedTrial({SPLIT_PARAM: split.label, "num_workers": 1}))
        assert BatchSplit(config.batch_size, config.grad_accum, config.world_size) == split
        assert s.params_of(config) == {SPLIT_PARAM: split.label, "num_workers": 1}
        assert s.contains(config)
    outside = space(QUICK, ()).default_config({"batch_size": 64})  # global batch 64: inside the knobs, not the split
    assert not s.contains(outside)


def test_a_single_feasible_split_is_no_param() -> None:
    s = space({"batch_size": {"low": 16, "high": 256}, "num_workers": {"low": 0, "high": 1}}, (200,))
    assert [x.label for x in s.splits] == ["200x1x1"] and not s.split_searched()
    assert set(s.distributions()) == {"num_workers"}
    config = s.suggest(optuna.trial.FixedTrial({"num_workers": 1}))
    assert (config.batch_size, config.global_batch) == (200, 200)


def test_static_graph_is_still_only_tried_without_accumulation() -> None:
    s = space({**QUICK, "static_graph": {"choices": [False, True]}}, (256,))
    accumulating = s.suggest(optuna.trial.FixedTrial({SPLIT_PARAM: "64x4x1", "num_workers": 0, "static_graph": True}))
    assert accumulating.grad_accum == 4 and accumulating.static_graph is False


def test_no_split_names_the_fix() -> None:
    with pytest.raises(NoFeasibleSplit, match=r"makes 100; .*e\.g\. \{choices: \[100, 50\]\}, or search grad_accum"):
        space({"batch_size": {"choices": [16, 32]}, "world_size": {"choices": [1, 2]}}, (100,))
    # with grad_accum already searched, the fix does not ask for it again
    with pytest.raises(NoFeasibleSplit) as caught:
        space({"batch_size": {"choices": [16, 32]}, "grad_accum": {"choices": [1, 2]}}, (100,))
    assert "search grad_accum" not in str(caught.value)
    # batch_size absent: it stays the workload's base batch, so only grad_accum x world_size can reach N
    assert [x.label for x in space({"grad_accum": {"choices": [1, 2, 4]}}, (256,)).splits] == ["64x4x1"]


# -- every split, against a brute-force enumeration ------------------------------------------------
@st.composite
def int_knob(draw: st.DrawFn, low: int, high: int) -> Any:
    kind = draw(st.sampled_from(["fixed", "choices", "range"]))
    if kind == "fixed":
        return draw(st.integers(low, high))
    if kind == "choices":
        return {"choices": draw(st.lists(st.integers(low, high), min_size=1, max_size=4, unique=True))}
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    step = draw(st.sampled_from([1, 1, 2, 3]))
    return {"low": a, "high": a + (b - a) // step * step, "step": step}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bs=int_knob(1, 300), ga=int_knob(1, 9), ws=int_knob(1, 9), held=st.lists(st.integers(1, 600), min_size=1,
                                                                                max_size=3, unique=True))
def test_feasible_splits_are_exactly_the_splits_of_the_space(bs: Any, ga: Any, ws: Any, held: list[int]) -> None:
    spec = SearchSpaceSpec.model_validate({"batch_size": bs, "grad_accum": ga, "world_size": ws})
    knobs = {n: getattr(spec, n) for n in ("batch_size", "grad_accum", "world_size")}

    def values(k: Any) -> list[int]:
        if isinstance(k, IntRange):
            return list(range(k.low, k.high + 1, k.step))
        return list(getattr(k, "choices", None) or [k.value])

    brute = {n: {BatchSplit(b, g, w) for b in values(knobs["batch_size"]) for g in values(knobs["grad_accum"])
                 for w in values(knobs["world_size"]) if b * g * w == n} for n in held}
    if not all(brute.values()):
        with pytest.raises(NoFeasibleSplit):
            feasible_splits(held, knobs)
        return
    splits = feasible_splits(held, knobs)
    assert len(splits) == len(set(splits)) == sum(len(v) for v in brute.values())
    assert set(splits) == set().union(*brute.values())
    s = SearchSpace.build(spec, base_lr=BASE_LR, base_batch_size=64, global_batch=tuple(held))
    sampler = optuna.samplers.RandomSampler(seed=0)
    study = optuna.create_study(sampler=sampler)
    for _ in range(5):
        config = s.suggest(study.ask())
        assert config.global_batch in held and config.lr == BASE_LR and s.contains(config)


def test_autotune_trial_set_completes_the_split_or_refuses_in_one_line() -> None:
    from autotune.cli._commands import _config_of_sets
    from autotune.errors import UsageError

    s = space(QUICK, (256,))
    config = _config_of_sets(s, ["batch_size=64"])
    assert (config.batch_size, config.grad_accum, config.world_size, config.lr) == (64, 4, 1, BASE_LR)
    config = _config_of_sets(s, ["world_size=2", "grad_accum=4"])
    assert (config.batch_size, config.global_batch) == (32, 256)
    refused = r"^--set: batch_size 64 x grad_accum 1 x world_size 2 is no split of the held global batch 256"
    with pytest.raises(UsageError, match=refused):
        _config_of_sets(s, ["batch_size=64", "world_size=2", "grad_accum=1"])


def test_a_searched_base_lr_still_sets_the_learning_rate_of_a_trial(tmp_path: Any) -> None:
    from autotune.search_space import param_name, study_space
    from autotune.spec import parse_spec

    spec = parse_spec({
        "name": "held-lr", "workload": {"entrypoint": "autotune.workloads.mlp:build", "args": {"hidden": 16}},
        "search_space": {"batch_size": {"choices": [64, 128]}, "world_size": {"choices": [1, 2]}},
        "hyperparameters": {"base_lr": {"choices": [0.001, 0.01]}}, "constraints": {"global_batch": 128},
    }, base_dir=tmp_path)
    s = study_space(spec)
    for split in ("128x1x1", "64x1x2"):
        for lr in (0.001, 0.01):
            config = s.suggest(optuna.trial.FixedTrial({SPLIT_PARAM: split, param_name("base_lr"): lr}))
            assert config.lr == lr and config.global_batch == 128
