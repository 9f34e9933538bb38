"""The search space: every config Optuna can suggest obeys the space's rules and round-trips through JSON.

Property tests draw random valid ``search_space:`` sections (ranges, choices and fixed values for the ten
knobs), build the SearchSpace on cpu or cuda, let a seeded RandomSampler suggest trials, and check each
TrialConfig. Exact tests pin the learning-rate formula and TrialConfig's refusals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autotune.errors import UsageError
from autotune.search_space import (
    KNOBS,
    MESH_PARAM,
    NoFeasibleMesh,
    SearchSpace,
    TrialConfig,
    mesh_problem,
    scaled_lr,
    study_space,
)
from autotune.spec import Choices, Fixed, SearchSpaceSpec, parse_spec


@pytest.fixture(autouse=True, scope="module")
def _quiet_optuna() -> Iterator[None]:
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(verbosity)


# --------------------------------------------------------------------------------------- strategies
_MESH_BOUND = {"world_size": 8, "tensor_parallel": 4, "pipeline_parallel": 4, "pipeline_microbatches": 8}
"""The mesh's knobs are drawn small: a mesh of hundreds of ranks is no different, and more feasible layouts
than the search takes as one param (MAX_LAYOUTS) is a refusal, tested apart."""


def _values(name: str) -> st.SearchStrategy[Any]:
    knob = KNOBS[name]
    if name in _MESH_BOUND:
        return st.integers(1, _MESH_BOUND[name])
    if knob.type is bool:
        return st.booleans()
    if knob.values is not None:
        return st.sampled_from(knob.values)
    assert knob.minimum is not None
    return st.integers(knob.minimum, knob.minimum + 64)


@st.composite
def knob_entry(draw: st.DrawFn, name: str) -> Any:
    """What a user may write for one knob: a value, {choices: [...]} or {low, high[, log | step]}."""
    knob = KNOBS[name]
    kinds = ["fixed", "choices"] + (["range"] if knob.ranged else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "fixed":
        return draw(_values(name))
    if kind == "choices":
        return {"choices": draw(st.lists(_values(name), min_size=1, max_size=4, unique=True))}
    assert knob.minimum is not None
    top = _MESH_BOUND.get(name)
    low = draw(st.integers(knob.minimum, top or knob.minimum + 64))
    entry: dict[str, Any] = {"low": low, "high": draw(st.integers(low, top or low + 300))}
    if low >= 1 and draw(st.booleans()):
        entry["log"] = True
    elif draw(st.booleans()):
        step = draw(st.integers(1, 8))
        entry["step"] = step
        entry["high"] = low + (entry["high"] - low) // step * step  # the study file refuses a ragged range
    return entry


@st.composite
def search_space_section(draw: st.DrawFn) -> dict[str, Any]:
    """A random valid search_space section: any subset of the knobs."""
    names = draw(st.lists(st.sampled_from(list(KNOBS)), unique=True))
    return {name: draw(knob_entry(name)) for name in names}


def _space_or_none(section: dict[str, Any], device: str, base_lr: float, base_batch: int) -> SearchSpace | None:
    """The space, or None when it has no feasible mesh (or too many to search as one param): refused there."""
    try:
        return SearchSpace.build(
            SearchSpaceSpec.model_validate(section), base_lr=base_lr, base_batch_size=base_batch, device=device
        )
    except NoFeasibleMesh:
        return None


spaces = st.builds(
    _space_or_none,
    search_space_section(),
    st.sampled_from(["cpu", "cuda"]),
    st.floats(1e-6, 1.0),
    st.integers(1, 4096),
)


def expected_lr(config: TrialConfig) -> float:
    x = config.global_batch / config.base_batch_size
    factor = {"none": 1.0, "linear": x, "sqrt": math.sqrt(x)}[config.lr_scaling]
    return config.base_lr * factor


def check_config(space: SearchSpace, config: TrialConfig) -> None:
    assert space.contains(config), config
    assert (config.prefetch_factor is None) == (config.num_workers == 0)
    assert config.global_batch == config.batch_size * config.grad_accum * config.data_parallel
    assert config.world_size == config.data_parallel * config.tensor_parallel * config.pipeline_parallel
    assert mesh_problem(config.knobs(), None) is None  # a feasible mesh: degrees, stages, micro-batches
    assert math.isclose(config.lr, expected_lr(config), rel_tol=1e-12)
    assert config.base_lr == space.base_lr and config.base_batch_size == space.base_batch_size
    assert config.device == space.device
    if space.device == "cpu":
        assert config.amp != "fp16" and config.pin_memory is False
    assert TrialConfig.model_validate_json(config.model_dump_json()) == config


# --------------------------------------------------------------------------------------- properties
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces, seed=st.integers(0, 2**31 - 1))
def test_every_suggested_config_obeys_the_space(space: SearchSpace | None, seed: int) -> None:
    assume(space is not None)
    assert space is not None
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    distributions = space.distributions()
    for _ in range(4):
        trial = study.ask()
        config = space.suggest(trial)
        check_config(space, config)
        # Optuna saw exactly the searched knobs (prefetch_factor only with workers), with these values; the
        # mesh's knobs, where a degree above 1 can occur, as one param of the feasible layouts.
        mesh = {MESH_PARAM} if space.mesh_searched() else set()
        assert set(trial.params) <= set(distributions) == set(space.searched()) | mesh
        assert trial.params == space.params_of(config)
        for name, value in trial.params.items():
            if name == MESH_PARAM:
                assert space.layouts[[lay.label for lay in space.layouts].index(value)].knobs().items() <= \
                    config.knobs().items()
                continue
            assert getattr(config, name) == value
        if config.num_workers == 0:
            assert "prefetch_factor" not in trial.params
        study.tell(trial, 1.0)


@settings(max_examples=60, deadline=None)
@given(space=spaces, seed=st.integers(0, 2**31 - 1))
def test_enqueued_params_give_back_the_same_config(space: SearchSpace | None, seed: int) -> None:
    """params_of is what a baseline or a confirmation run enqueues; suggest must rebuild the config."""
    assume(space is not None)
    assert space is not None
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    config = space.suggest(study.ask())
    study.enqueue_trial(space.params_of(config))
    assert space.suggest(study.ask()) == config


@settings(max_examples=100, deadline=None)
@given(section=search_space_section())
def test_cuda_only_values_never_on_cpu(section: dict[str, Any]) -> None:
    """On cpu (device auto without a GPU) fp16 and pinned memory are dropped, each with a note."""
    spec = SearchSpaceSpec.model_validate(section)
    built = _space_or_none(section, "cpu", 1e-3, 64)
    assume(built is not None)
    space = built
    assert space is not None
    for name, bad in (("amp", "fp16"), ("pin_memory", True)):
        values = spec.values_of(name)
        kept = space.knobs[name]
        kept_values = (kept.value,) if isinstance(kept, Fixed) else kept.choices  # type: ignore[union-attr]
        assert bad not in kept_values
        assert (values is not None and bad in values) == any(n.startswith(f"{name}:") for n in space.notes)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        check_config(space, space.suggest(study.ask()))


@settings(max_examples=100, deadline=None)
@given(
    base_lr=st.floats(1e-6, 1.0),
    base_batch=st.integers(1, 4096),
    batch=st.integers(1, 512),
    accum=st.integers(1, 16),
    world=st.integers(1, 16),
    rule=st.sampled_from(["none", "linear", "sqrt"]),
    workers=st.integers(0, 8),
    prefetch=st.none() | st.integers(1, 8),
)
def test_create_derives_consistent_values(
    base_lr: float, base_batch: int, batch: int, accum: int, world: int, rule: Any, workers: int,
    prefetch: int | None,
) -> None:
    config = TrialConfig.create(
        base_lr=base_lr, base_batch_size=base_batch, batch_size=batch, grad_accum=accum, world_size=world,
        lr_scaling=rule, num_workers=workers, prefetch_factor=prefetch,
    )
    assert config.global_batch == batch * accum * world
    assert math.isclose(config.lr, expected_lr(config), rel_tol=1e-12)
    assert config.prefetch_factor == (None if workers == 0 else (prefetch or 2))
    assert TrialConfig.model_validate_json(config.model_dump_json()) == config


# --------------------------------------------------------------------------------------- the lr formula
@pytest.mark.parametrize(
    ("rule", "global_batch", "lr"),
    [
        ("none", 256, 1e-3),
        ("linear", 256, 4e-3),
        ("sqrt", 256, 2e-3),
        ("none", 16, 1e-3),
        ("linear", 16, 2.5e-4),
        ("sqrt", 16, 5e-4),
        ("linear", 64, 1e-3),
        ("sqrt", 64, 1e-3),
    ],
)
def test_scaled_lr_exact(rule: Any, global_batch: int, lr: float) -> None:
    assert scaled_lr(1e-3, 64, global_batch, rule) == pytest.approx(lr, rel=1e-12)


def test_trial_config_lr_from_batch_accum_and_ranks() -> None:
    # global batch 32 * 2 * 4 = 256 = 4x the base batch 64
    def make(rule: Any) -> TrialConfig:
        return TrialConfig.create(
            base_lr=1e-3, base_batch_size=64, batch_size=32, grad_accum=2, world_size=4, lr_scaling=rule
        )

    assert make("none").global_batch == 256
    assert make("none").lr == pytest.approx(1e-3)
    assert make("linear").lr == pytest.approx(4e-3)
    assert make("sqrt").lr == pytest.approx(2e-3)


def test_default_lr_scaling_is_sqrt() -> None:
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=256)
    assert config.lr_scaling == "sqrt"
    assert config.lr == pytest.approx(2e-3)


# --------------------------------------------------------------------------------------- refusals
def _good(**changes: Any) -> dict[str, Any]:
    config = TrialConfig.create(
        base_lr=1e-3, base_batch_size=64, batch_size=32, grad_accum=2, world_size=2, num_workers=2,
        prefetch_factor=4, lr_scaling="linear", device="cuda",
    )
    return {**config.model_dump(), **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"global_batch": 64}, "global_batch must equal batch_size * grad_accum * data_parallel"),
        ({"world_size": 4}, "global_batch must equal"),
        ({"lr": 1e-3}, "does not follow lr_scaling linear"),
        ({"lr_scaling": "sqrt"}, "does not follow lr_scaling sqrt"),
        ({"base_lr": 2e-3}, "does not follow lr_scaling"),
        ({"prefetch_factor": None}, "prefetch_factor is set exactly when num_workers > 0"),
        ({"num_workers": 0}, "prefetch_factor is set exactly when num_workers > 0"),
        ({"device": "cpu", "amp": "fp16"}, "fp16 and pin_memory need device cuda"),
        ({"device": "cpu", "pin_memory": True}, "fp16 and pin_memory need device cuda"),
        ({"amp": "fp8"}, "amp"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr_scaling": "cubic"}, "lr_scaling"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_trial_config_refuses_inconsistent_values(changes: dict[str, Any], message: str) -> None:
    TrialConfig.model_validate(_good())  # the unchanged config is fine
    with pytest.raises(ValidationError, match=message.replace("*", r"\*").replace("(", r"\(")):
        TrialConfig.model_validate(_good(**changes))


def test_trial_config_json_is_checked_too() -> None:
    """A config.json edited by hand is validated like any other input."""
    text = TrialConfig.model_validate(_good()).model_dump_json()
    assert TrialConfig.model_validate_json(text) == TrialConfig.model_validate(_good())
    with pytest.raises(ValidationError, match="global_batch must equal"):
        TrialConfig.model_validate_json(text.replace('"global_batch":128', '"global_batch":256'))


def test_trial_config_is_frozen() -> None:
    config = TrialConfig.model_validate(_good())
    with pytest.raises(ValidationError):
        config.batch_size = 64  # type: ignore[misc]


# --------------------------------------------------------------------------------------- device auto
def _auto_spec(tmp_path: Path) -> Any:
    (tmp_path / "wl.py").write_text(
        "import autotune\n\ndef build():\n"
        "    return autotune.Workload(model=lambda: None, dataset=lambda: [], loss=lambda m, b: 0.0)\n"
    )
    document = {
        "name": "auto",
        "workload": {"entrypoint": "wl.py:build"},
        "launcher": {"device": "auto"},
        "search_space": {"amp": {"choices": ["off", "bf16", "fp16"]}, "pin_memory": True},
    }
    return parse_spec(document, source="auto.yaml", base_dir=tmp_path)


def test_device_auto_on_a_cpu_machine_drops_cuda_only_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    space = study_space(_auto_spec(tmp_path))
    assert space.device == "cpu"
    assert space.knobs["amp"] == Choices(choices=("off", "bf16"))
    assert space.knobs["pin_memory"] == Fixed(value=False)
    assert space.notes == [
        "pin_memory: True needs CUDA; using False on this device",
        "amp: fp16 needs CUDA; dropped from the choices on this device",
    ]


def test_device_auto_on_a_gpu_machine_keeps_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    space = study_space(_auto_spec(tmp_path))
    assert space.device == "cuda"
    assert space.knobs["amp"] == Choices(choices=("off", "bf16", "fp16"))
    assert space.knobs["pin_memory"] == Fixed(value=True)
    assert space.notes == []


def test_default_config_is_the_workload_default() -> None:
    spec = SearchSpaceSpec.model_validate(
        {"num_workers": {"low": 1, "high": 4}, "amp": "bf16", "world_size": 2}
    )
    config = SearchSpace.build(spec, base_lr=1e-3, base_batch_size=48).default_config()
    expected = {
        "batch_size": 48, "grad_accum": 1, "lr_scaling": "sqrt", "num_workers": 0, "prefetch_factor": None,
        "pin_memory": False, "amp": "off", "activation_checkpointing": False, "bucket_cap_mb": 25,
        "world_size": 1, "threads_per_rank": "auto", "compile": "off", "sharding": "ddp",
        "gradient_as_bucket_view": False, "static_graph": False, "tensor_parallel": 1, "pipeline_parallel": 1,
        "pipeline_schedule": None, "pipeline_microbatches": None,  # no pipeline: its knobs unset
    }
    # a knob added to the knob table later: its default from the table
    assert config.knobs() == {**{name: knob.default for name, knob in KNOBS.items()}, **expected}
    assert config.lr == pytest.approx(1e-3)


# --------------------------------------------------------------------------------------- parse_sets
@pytest.fixture
def cpu_space() -> SearchSpace:
    return SearchSpace.build(SearchSpaceSpec(), base_lr=1e-3, base_batch_size=64, device="cpu")


def test_parse_sets_reads_typed_values(cpu_space: SearchSpace) -> None:
    sets = ["batch_size=128", "amp=off", "activation_checkpointing=true", " grad_accum=2"]
    assert cpu_space.parse_sets(sets) == {
        "batch_size": 128, "amp": "off", "activation_checkpointing": True, "grad_accum": 2,
    }


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("batch_size", "--set 'batch_size': expected knob=value, e.g. --set batch_size=64"),
        ("batchsize=64", "--set batchsize: unknown knob 'batchsize'; did you mean 'batch_size'?"),
        ("colour=red", "knobs are: batch_size"),
        ("batch_size=big", "--set batch_size: 'big' is not an integer"),
        ("batch_size=0", "--set batch_size: 0 is below the minimum 1"),
        ("amp=fp8", "--set amp: 'fp8' is not a valid value; give one of 'off', 'bf16', 'fp16'"),
        ("pin_memory=yes", "--set pin_memory: 'yes' is not true or false"),
        ("batch_size={low: 8, high: 64}", "--set batch_size: give one value, e.g. --set batch_size=64"),
        ("amp={choices: [off]}", "--set amp: give one value"),
        ("grad_accum=[1, 2]", "--set grad_accum: a bare list is ambiguous"),
        ("amp=fp16", "--set amp: fp16 needs CUDA; this study runs on cpu"),
        ("pin_memory=true", "--set pin_memory: True needs CUDA; this study runs on cpu"),
        ("amp=[off", "fix the YAML syntax"),
    ],
)
def test_parse_sets_errors(cpu_space: SearchSpace, item: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        cpu_space.parse_sets(["grad_accum=2", item])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_sets_cuda_values_on_cuda() -> None:
    space = SearchSpace.build(SearchSpaceSpec(), base_lr=1e-3, base_batch_size=64, device="cuda")
    assert space.parse_sets(["amp=fp16", "pin_memory=true"]) == {"amp": "fp16", "pin_memory": True}


@pytest.mark.parametrize("amp", ["fp16", {"choices": ["fp16"]}])
def test_a_single_amp_value_that_no_pipeline_takes_leaves_no_mesh(amp: Any) -> None:
    # found by the property test above: amp's only choice fp16 beside a fixed pipeline was built, then refused
    # at suggest; fixed or the only choice, it rules the pipeline out at build
    section = SearchSpaceSpec.model_validate({"amp": amp, "world_size": 2, "pipeline_parallel": 2})
    with pytest.raises(NoFeasibleMesh, match="amp fp16 does not combine with pipeline_parallel 2"):
        SearchSpace.build(section, base_lr=1.0, base_batch_size=4, device="cuda")
