"""threads_per_rank, compile, sharding, the DDP flags and the env: section: parsing, one-line errors,
conditional sampling, Optuna params, configuration keys, Calibration helpers and compile payback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import optuna
import pytest

from autotune import Calibration
from autotune.errors import StudyFileError, UsageError
from autotune.knobs import ddp_arguments
from autotune.objectives import config_key
from autotune.objectives._compile_payback import compile_payback
from autotune.search_space import SearchSpace, TrialConfig
from autotune.spec import StudySpec, parse_spec
from tests._cli import autotune

BASE = {"name": "k", "workload": {"entrypoint": "autotune.workloads.mlp:build"}}


def spec(**sections: Any) -> StudySpec:
    return parse_spec({**BASE, **sections})


def space_of(**sections: Any) -> SearchSpace:
    s = spec(**sections)
    return SearchSpace.build(s.search_space, base_lr=1e-3, base_batch_size=64, env=s.env)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"search_space": {"threads_per_rank": 0}}, "search_space.threads_per_rank: 0 is below the minimum 1; "
                                                    "give an integer >= 1, auto, share or half"),
        ({"search_space": {"threads_per_rank": {"choices": ["auto", "quarter"]}}},
         "search_space.threads_per_rank: choices[1]: 'quarter' is not a word it takes; give an integer >= 1, auto, "
         "share or half"),
        ({"search_space": {"threads_per_rank": {"low": "auto", "high": 4}}}, "a range takes integers"),
        ({"search_space": {"compile": "fast"}}, "search_space.compile: 'fast' is not a valid value; give one of "
                                                "'off', 'default', 'reduce-overhead', 'max-autotune-no-cudagraphs'"),
        ({"search_space": {"sharding": "zero5"}}, "search_space.sharding: 'zero5' is not a valid value"),
        ({"search_space": {"static_graph": "yes"}}, "search_space.static_graph: 'yes' is not true or false"),
        ({"env": {"RANK": "3"}}, "env: RANK: autotune sets this variable itself"),
        ({"env": {"MASTER_PORT": "1"}}, "MASTER_PORT: autotune sets this variable itself"),
        ({"env": {"OMP_NUM_THREADS": "2"}}, "set search_space.threads_per_rank instead"),
        ({"env": {"SLURM_JOB_ID": "2"}}, "SLURM_* variables"),
        ({"env": {"NCCL_BUFFSIZE": 4194304}}, "NCCL_BUFFSIZE: 4194304 is not a string; environment values are "
                                              "strings, quote it: '4194304'"),
        ({"env": {"NCCL_ALGO": {"choices": ["Ring", 2]}}}, "NCCL_ALGO: choices[1]: 2 is not a string"),
        ({"env": {"NCCL ALGO": "Ring"}}, "'NCCL ALGO' is not an environment variable name"),
        ({"env": ["NCCL_ALGO"]}, "env: expected a mapping of NAME: value"),
        ({"search_space": {"compile": "default"}, "trial": {"warmup_steps": 0, "max_steps": 4}},
         "trial.warmup_steps: compile compiles the model in the first step"),
        ({"search_space": {"static_graph": True, "grad_accum": {"low": 1, "high": 4}}},
         "search_space.static_graph: true cannot meet grad_accum above 1: DDP's no_sync() under a static graph "
         "fails inside torch (pytorch/pytorch#143580); use static_graph: {choices: [false, true]}"),
        ({"search_space": {"static_graph": True, "grad_accum": {"choices": [1, 2]}}},
         "search_space.static_graph: true cannot meet grad_accum above 1"),
        ({"baseline": {"static_graph": True, "grad_accum": 2}}, "baseline.static_graph: true cannot meet grad_accum"),
    ],
)
def test_bad_values_are_one_line_errors(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(StudyFileError) as error:
        spec(**sections)
    text = str(error.value)
    assert message in text
    assert "\n" not in text


def test_validate_exits_2_with_one_line(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text("name: k\nworkload: {entrypoint: autotune.workloads.mlp:build}\nenv: {RANK: '0'}\n")
    done = autotune("validate", str(study))
    assert done.exit_code == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "env: RANK" in done.stderr


def test_good_values_parse_and_fit_the_json_schema() -> None:
    document = {
        **BASE,
        "search_space": {
            "threads_per_rank": {"choices": ["auto", "share", "half", 1, 2]},
            "compile": {"choices": ["off", "default"]},
            "sharding": {"choices": ["ddp", "fsdp", "fsdp_no_reshard"]}, "gradient_as_bucket_view": True,
            "static_graph": {"choices": [False, True]},
        },
        "env": {"OMP_WAIT_POLICY": {"choices": ["PASSIVE", "ACTIVE"]}, "GLOO_SOCKET_IFNAME": "lo"},
    }
    jsonschema.validate(document, StudySpec.model_json_schema())
    s = parse_spec(document)
    assert s.search_space.values_of("threads_per_rank") == ("auto", "share", "half", 1, 2)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**BASE, "env": {"X": 1}}, StudySpec.model_json_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**BASE, "search_space": {"threads_per_rank": {"low": "auto", "high": 2}}},
                            StudySpec.model_json_schema())
    threads_range = parse_spec({**BASE, "search_space": {"threads_per_rank": {"low": 1, "high": 4}}})
    assert threads_range.search_space.threads_per_rank.high == 4


def test_ddp_knobs_are_sampled_only_with_ddp_and_env_as_env_params() -> None:
    space = space_of(
        search_space={"sharding": {"choices": ["ddp", "fsdp"]}, "bucket_cap_mb": {"choices": [5, 25]},
                      "static_graph": {"choices": [False, True]}, "threads_per_rank": {"choices": ["auto", 1]}},
        env={"OMP_WAIT_POLICY": {"choices": ["PASSIVE", "ACTIVE"]}, "FIXED_FLAG": "1"},
    )
    assert "env.OMP_WAIT_POLICY" in space.distributions()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        config = space.suggest(trial)
        seen.add(config.sharding)
        assert config.env["FIXED_FLAG"] == "1"
        assert config.env["OMP_WAIT_POLICY"] == trial.params["env.OMP_WAIT_POLICY"]
        if config.sharding == "ddp":
            assert {"bucket_cap_mb", "static_graph"} <= set(trial.params)
            assert config.bucket_cap_mb in (5, 25)
        else:
            assert "bucket_cap_mb" not in trial.params and "static_graph" not in trial.params
            assert config.bucket_cap_mb is None and config.static_graph is None
            assert config.gradient_as_bucket_view is None
        assert space.params_of(config) == trial.params
        study.tell(trial, 1.0)
    assert seen == {"ddp", "fsdp"}
    # the baseline runs the fixed variables only; a searched one is left unset
    assert space.default_config().env == {"FIXED_FLAG": "1"}


def test_static_graph_is_searched_at_grad_accum_1_only() -> None:
    """DDP's no_sync() under a static graph fails inside torch (pytorch/pytorch#143580): a searched static_graph
    is suggested only where grad_accum is 1, false elsewhere, and a config with both is refused."""
    space = space_of(search_space={"grad_accum": {"low": 1, "high": 3}, "static_graph": {"choices": [False, True]}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        config = space.suggest(trial)
        seen.add((config.grad_accum > 1, config.static_graph))
        if config.grad_accum > 1:
            assert "static_graph" not in trial.params and config.static_graph is False
        else:
            assert "static_graph" in trial.params
        assert space.params_of(config) == trial.params
        study.tell(trial, 1.0)
    assert seen == {(False, False), (False, True), (True, False)}
    with pytest.raises(ValueError, match=r"static_graph cannot be combined with grad_accum above 1: .*#143580"):
        _config(static_graph=True, grad_accum=2)
    stored = {**_config(grad_accum=2).model_dump(), "static_graph": True}  # an older study's one-rank trial
    assert TrialConfig.model_validate(stored).static_graph is True  # still loads
    assert spec(search_space={"static_graph": True, "grad_accum": 1}).search_space.values_of("static_graph") == (True,)


def test_set_takes_env_values_and_new_knobs() -> None:
    space = space_of(env={"OMP_WAIT_POLICY": {"choices": ["PASSIVE", "ACTIVE"]}, "FIXED_FLAG": "1"})
    values = space.parse_sets(["env.OMP_WAIT_POLICY=PASSIVE", "threads_per_rank=2", "sharding=fsdp",
                               "compile=default"])
    config = space.config(values)
    assert config.env == {"FIXED_FLAG": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    assert (config.threads_per_rank, config.sharding, config.compile) == (2, "fsdp", "default")
    with pytest.raises(UsageError, match=r"env\.NOPE: NOPE is not in the study's env: section"):
        space.parse_sets(["env.NOPE=1"])
    with pytest.raises(UsageError, match="threads_per_rank"):
        space.parse_sets(["threads_per_rank=0"])


def _config(**knobs: Any) -> TrialConfig:
    return TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=64, **knobs)


def test_config_keys_of_earlier_studies_stay_and_new_knobs_enter_when_set() -> None:
    default = _config().model_dump(mode="json")
    old = {k: v for k, v in default.items()
           if k not in ("threads_per_rank", "compile", "sharding", "gradient_as_bucket_view", "static_graph", "env")}
    assert config_key(default) == config_key(old)  # a config stored before these knobs existed
    assert "threads_per_rank=2" in config_key(_config(threads_per_rank=2).model_dump(mode="json"))
    fsdp = config_key(_config(sharding="fsdp").model_dump(mode="json"))
    assert "sharding=fsdp" in fsdp and "bucket_cap_mb=none" in fsdp
    assert config_key(_config(env={"A": "1"}).model_dump()) != config_key(_config(env={"A": "2"}).model_dump())


def test_trial_config_refuses_ddp_knobs_under_fsdp() -> None:
    data = _config().model_dump()
    with pytest.raises(ValueError, match="set exactly when sharding is ddp"):
        TrialConfig.model_validate({**data, "sharding": "fsdp"})
    assert TrialConfig.model_validate_json(_config(sharding="fsdp", threads_per_rank=3).model_dump_json()) \
        == _config(sharding="fsdp", threads_per_rank=3)


def test_calibration_helpers_carry_the_new_knobs() -> None:
    chosen = Calibration(config=_config(threads_per_rank=3, env={"NCCL_ALGO": "Tree"}, static_graph=True,
                                        gradient_as_bucket_view=True, bucket_cap_mb=5), study=None)
    assert chosen.env() == {"NCCL_ALGO": "Tree", "OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
    assert chosen.torch_threads() == 3
    assert chosen.ddp_kwargs() == {**ddp_arguments(chosen.config), "bucket_cap_mb": 5, "gradient_as_bucket_view": True,
                                   "static_graph": True}  # every DDP knob of the table; these three as chosen
    sharded = Calibration.from_json(_config(sharding="fsdp_no_reshard", compile="default").model_dump_json())
    assert sharded.ddp_kwargs() == {}
    assert sharded.env() == {}
    hf = sharded.to_hf_training_arguments()
    assert hf["fsdp"] == "shard_grad_op" and hf["torch_compile_mode"] == "default"

    import torch

    model = torch.nn.Linear(2, 2)
    assert sharded.apply_compile(model) is model and model._compiled_call_impl is not None
    plain = torch.nn.Linear(2, 2)
    assert chosen.apply_compile(plain)._compiled_call_impl is None
    assert chosen.apply_sharding(plain) is plain  # ddp: left for DDP(**ddp_kwargs())


def row(number: int, throughput: float, compile_mode: str = "off", compile_s: float | None = None,
        **knobs: Any) -> dict[str, Any]:
    return {"number": number, "config": _config(compile=compile_mode, **knobs).model_dump(mode="json"),
            "throughput_samples_s": throughput, "compile_s": compile_s}


def test_compile_payback_counts_the_steps_that_win_the_compile_time_back() -> None:
    compiled = row(3, 1280.0, "default", compile_s=15.0)  # 64 samples/step: 0.05 s a step
    twin = row(1, 640.0)  # 0.1 s a step uncompiled: 0.05 s won per step -> 300 steps
    other = row(2, 1000.0, num_workers=1)
    payback = compile_payback(compiled, [twin, other, compiled])
    assert payback is not None and payback.same_config and payback.against_trial == 1
    assert payback.steps == 300 and payback.minutes == pytest.approx(300 * 0.05 / 60)
    assert "300 steps" in payback.describe()
    # no uncompiled twin: against the best uncompiled configuration
    fallback = compile_payback(compiled, [other])
    assert fallback is not None and not fallback.same_config and fallback.against_trial == 2
    # slower compiled: never won back
    slow = compile_payback(row(4, 500.0, "default", compile_s=15.0), [twin])
    assert slow is not None and slow.steps is None and "never" in slow.describe()
    assert compile_payback(twin, [compiled]) is None  # not compiled


def test_report_table_shows_searched_env_threads_and_compile_columns() -> None:
    from optuna.distributions import CategoricalDistribution

    from autotune.report import trials_table_data

    study = optuna.create_study(direction="maximize")
    dists = {"compile": CategoricalDistribution(["off", "default"]),
             "env.OMP_WAIT_POLICY": CategoricalDistribution(["PASSIVE", "ACTIVE"])}
    for number, (mode, policy, compile_s) in enumerate([("off", "PASSIVE", None), ("default", "ACTIVE", 12.5)]):
        config = _config(compile=mode, env={"OMP_WAIT_POLICY": policy}).model_dump(mode="json")
        study.add_trial(optuna.trial.create_trial(
            params={"compile": mode, "env.OMP_WAIT_POLICY": policy}, distributions=dists, value=100.0 + number,
            user_attrs={"role": "search", "outcome": "complete", "config": config, "throughput_samples_s": 100.0,
                        "threads_per_rank": 2, "compile_s": compile_s},
        ))
    table = trials_table_data(study)
    keys = [c.key for c in table.columns]
    assert {"compile", "env.OMP_WAIT_POLICY", "threads_resolved", "compile_s"} <= set(keys)
    rows = [dict(zip(keys, r, strict=True)) for r in table.rows]
    assert [r["env.OMP_WAIT_POLICY"] for r in rows] == ["PASSIVE", "ACTIVE"]
    assert [r["compile_s"] for r in rows] == [None, 12.5]
    assert rows[0]["threads_resolved"] == 2  # what the trial ran with (its setting, auto, is not searched)
    assert len(keys) == len(set(keys))


def test_gp_search_over_sharding_with_pruned_fsdp_trials_lacking_ddp_knobs() -> None:
    from autotune.samplers import PartialGPSampler

    space = space_of(search_space={"sharding": {"choices": ["ddp", "fsdp"]}, "bucket_cap_mb": {"choices": [1, 25]},
                                   "threads_per_rank": {"choices": ["auto", 1, 2]}})
    study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=2))
    study.enqueue_trial({"sharding": "ddp", "bucket_cap_mb": 25, "threads_per_rank": "auto"})
    study.enqueue_trial({"sharding": "fsdp", "threads_per_rank": 2})
    for i in range(8):
        trial = study.ask()
        config = space.suggest(trial)
        if config.sharding == "fsdp":  # pruned: the GP fits it, and it has no bucket_cap_mb param
            trial.report(50.0 + i, 3)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, 100.0 + i)
    assert len(study.trials) == 8


@pytest.mark.parametrize(
    ("search_space", "device", "noted"),
    [
        ({"threads_per_rank": {"low": 1, "high": 2}, "world_size": {"choices": [1, 2]}}, "cpu", "world_size"),
        ({"threads_per_rank": {"choices": [1, 2]}, "num_workers": {"low": 0, "high": 2}}, "cpu", "num_workers"),
        ({"threads_per_rank": {"low": 1, "high": 2}, "world_size": {"choices": [1, 2]},
          "num_workers": {"low": 0, "high": 2}}, "cpu", "world_size and num_workers"),
        ({"threads_per_rank": {"choices": ["auto", 1, 2]}, "world_size": {"choices": [1, 2]}}, "cpu", "world_size"),
        ({"threads_per_rank": {"choices": ["auto", "share", "half"]}, "world_size": {"choices": [1, 2]},
          "num_workers": {"low": 0, "high": 2}}, "cpu", None),  # the words: resolved against each rank's share
        ({"threads_per_rank": {"choices": ["auto", 1]}, "world_size": {"choices": [1, 2]}}, "cpu", None),  # 1 fits
        ({"threads_per_rank": {"low": 1, "high": 2}}, "cpu", None),  # ranks and workers fixed: a count is fine
        ({"threads_per_rank": 2, "world_size": {"choices": [1, 2]}}, "cpu", None),  # fixed: the user's choice
        ({"threads_per_rank": {"low": 1, "high": 2}, "world_size": {"choices": [1, 2]}}, "cuda", None),
    ],
)
def test_searching_thread_counts_beside_ranks_or_workers_is_noted(
    search_space: dict[str, Any], device: str, noted: str | None
) -> None:
    # A plain count is the same at every rank and worker count: 2 threads at 2 ranks on 2 cores is 4 busy
    # threads, and calibration_gain's studies that searched 1-2 that way lost to grids that all ran auto.
    s = spec(search_space=search_space)
    space = SearchSpace.build(s.search_space, base_lr=1e-3, base_batch_size=64, device=device)
    notes = [n for n in space.notes if n.startswith("threads_per_rank:")]
    if noted is None:
        assert notes == []
    else:
        assert notes == [f"threads_per_rank: searched with numbers beside a searched {noted}; a number is the same "
                         "at every rank and worker count, so some configurations run more busy threads than "
                         "cores; search the words resolved against each rank's share of the cores instead "
                         "({choices: [auto, share, half]})"]


def test_validate_prints_the_thread_count_note(tmp_path: Path) -> None:
    import yaml

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**BASE, "search_space": {"threads_per_rank": {"low": 1, "high": 2},
                                                              "world_size": {"choices": [1, 2]}}}))
    out = autotune("validate", str(study), cwd=tmp_path)
    assert out.exit_code == 0, out.output
    assert "threads_per_rank: searched with numbers beside a searched world_size" in " ".join(out.stdout.split())
