"""The ``hyperparameters:`` section: build() arguments, base_lr and optimizer keyword arguments searched
beside the knobs, reaching the model in real trials, recorded, returned by calibrate() and shown."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from rich.console import Console

import autotune
from autotune.cli import main
from autotune.cli._validate import render_resolved_study as render_summary
from autotune.errors import StudyFileError
from autotune.objectives import config_key
from autotune.search_space import HyperparameterSpace, study_space
from autotune.spec import Choices, FloatRange, IntRange, parse_spec
from autotune.workload_check import load_spec

HERE = Path(__file__).parent
WORKLOAD = HERE / "hyperparameter_workload.py"

STUDY = """\
name: hp
workload:
  entrypoint: hyperparameter_workload.py:build
  args: {{record: {record}}}
hyperparameters:
  width: {{choices: [4, 16, 32]}}
  dropout: {{low: 0.0, high: 0.5}}
  activation: {{choices: [relu, tanh, gelu]}}
  base_lr: {{low: 0.001, high: 0.1, log: true}}
  optimizer.momentum: {{low: 0.0, high: 0.9}}
search_space:
  batch_size: {{choices: [16, 32]}}
  lr_scaling: linear
trial: {{warmup_steps: 1, max_steps: 6, max_seconds: 40, report_every: 2}}
sampler: {{name: random, seed: 1}}
pruner: {{name: none}}
budget: {{n_trials: 3}}
confirm: {{top_k: 1, repeats: 1}}
"""


def _study(folder: Path, text: str | None = None) -> Path:
    (folder / "hyperparameter_workload.py").write_text(WORKLOAD.read_text())
    record = folder / "record"
    record.mkdir(exist_ok=True)
    path = folder / "study.yaml"
    path.write_text(text if text is not None else STUDY.format(record=record))
    return path


def _doc(**hyperparameters: Any) -> dict[str, Any]:
    return {"name": "x", "workload": {"entrypoint": "a:b"}, "hyperparameters": hyperparameters}


# ------------------------------------------------------------------------------------------ the study file
def test_entries_parse_as_fixed_choices_int_and_float_ranges() -> None:
    spec = parse_spec(_doc(
        dropout={"low": 0.0, "high": 0.3}, lr={"low": 1e-5, "high": 1e-2, "log": True}, depth={"low": 1, "high": 4},
        act={"choices": ["relu", "gelu"]}, tag="v1", sizes={"value": [1, 2]},
    ))
    hp = spec.hyperparameters
    assert hp["dropout"] == FloatRange(low=0.0, high=0.3)
    assert hp["lr"] == FloatRange(low=1e-5, high=1e-2, log=True)
    assert hp["depth"] == IntRange(low=1, high=4)
    assert hp["act"] == Choices(choices=("relu", "gelu"))
    assert hp["tag"].value == "v1" and hp["sizes"].value == [1, 2]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"dropout": [0.1, 0.2]}, "hyperparameters.dropout: a bare list is ambiguous"),
        ({"dropout": {"low": 0.5, "high": 0.1}}, "hyperparameters.dropout: low (0.5) is greater than high (0.1)"),
        ({"lr": {"low": 0.0, "high": 0.1, "log": True}}, "hyperparameters.lr: a log range needs low > 0"),
        ({"lr": {"lo": 0.1, "high": 0.2}}, "hyperparameters.lr: unknown key 'lo'; did you mean 'low'?"),
        ({"act": {"choices": []}}, "hyperparameters.act: choices is empty"),
        ({"base_lr": -1.0}, "hyperparameters.base_lr: the learning rate must be a positive number"),
    ],
)
def test_bad_entries_are_one_line_errors_naming_the_field(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(StudyFileError) as e:
        parse_spec(_doc(**entry))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_name_in_args_and_hyperparameters_is_refused() -> None:
    doc = _doc(width=4)
    doc["workload"]["args"] = {"width": 8}
    with pytest.raises(StudyFileError, match=r"hyperparameters.width: also given in workload.args"):
        parse_spec(doc)


def test_unknown_build_argument_is_refused_at_validate(tmp_path: Path) -> None:
    study = _study(tmp_path, STUDY.format(record="''").replace("  dropout:", "  dropuot:"))
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "hyperparameters.dropuot" in lines[0] and "build() takes no argument 'dropuot'" in lines[0]
    assert "did you mean 'dropout'?" in lines[0]
    assert "its parameters: width, dropout, activation, record" in lines[0]


def test_unknown_optimizer_argument_is_refused_at_validate(tmp_path: Path) -> None:
    study = _study(tmp_path, STUDY.format(record="''").replace("optimizer.momentum", "optimizer.weight_decay"))
    with pytest.raises(StudyFileError) as e:
        load_spec(study)
    message = str(e.value)
    assert "hyperparameters.optimizer.weight_decay: the workload's optimizer optimizer() takes no argument" in message
    assert "its parameters: momentum, nesterov" in str(e.value)


def test_validate_shows_each_hyperparameter(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, STUDY.format(record="''")))
    out = io.StringIO()
    render_summary(spec, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "hyperparameters" in text
    assert "build(dropout=...)" in text and "searched (hp.dropout)" in text
    assert "Workload.base_lr (scaled by lr_scaling)" in text and "0.001..0.1 log" in text
    assert "optimizer(momentum=...)" in text and "{relu, tanh, gelu}" in text


# ------------------------------------------------------------------------------------------ the space
def test_space_suggests_hp_params_and_the_baseline_takes_the_workloads_defaults(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, STUDY.format(record="''")))
    space = study_space(spec)
    assert set(space.distributions()) >= {
        "hp.width", "hp.dropout", "hp.activation", "hp.base_lr", "hp.optimizer.momentum", "batch_size"
    }
    baseline = space.default_config()
    # build()'s own defaults, the workload's base_lr, the optimizer factory's default; width has none.
    assert baseline.hyperparameters == {
        "width": 4, "dropout": 0.0, "activation": "relu", "base_lr": 0.05, "optimizer.momentum": 0.0
    }
    assert baseline.lr == pytest.approx(0.05 * baseline.global_batch / 16)
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    config = space.suggest(trial)
    assert trial.params["hp.base_lr"] == config.hyperparameters["base_lr"] == config.base_lr
    assert config.lr == pytest.approx(config.base_lr * config.global_batch / 16)  # lr_scaling linear
    assert space.contains(config)
    assert space.params_of(config) == {k: v for k, v in trial.params.items()}


def test_list_choices_are_stored_as_json_text_and_decoded() -> None:
    space = HyperparameterSpace.build(
        {"optimizer.betas": Choices(choices=([0.9, 0.99], [0.9, 0.95]))}, optimizer_defaults={"betas": (0.9, 0.999)}
    )
    study = optuna.create_study()
    trial = study.ask()
    values = space.suggest(trial)
    assert values["optimizer.betas"] in ([0.9, 0.99], [0.9, 0.95])
    assert trial.params["hp.optimizer.betas"] == json.dumps(values["optimizer.betas"])
    assert space.defaults == {"optimizer.betas": (0.9, 0.999)}


def test_configurations_differing_only_in_a_hyperparameter_have_different_keys(tmp_path: Path) -> None:
    space = study_space(load_spec(_study(tmp_path, STUDY.format(record="''"))))
    a = space.config({"hyperparameters": {"dropout": 0.1}})
    b = space.config({"hyperparameters": {"dropout": 0.2}})
    assert a.knobs() == b.knobs()
    assert config_key(a.model_dump()) != config_key(b.model_dump())
    # a tuple and the list it becomes in storage are the same configuration
    c = space.config({"hyperparameters": {"dropout": 0.1}})
    assert config_key(json.loads(c.model_dump_json())) == config_key(a.model_dump())


# ------------------------------------------------------------------------------------------ real trials
@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[autotune.Calibration, Path]:
    folder = tmp_path_factory.mktemp("hp")
    study = _study(folder)
    return autotune.calibrate(study), folder


def _calls(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "record" / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_searched_values_reach_the_model_and_optimizer_in_every_trial(
    calibrated: tuple[autotune.Calibration, Path],
) -> None:
    calibration, folder = calibrated
    calls = [c for c in _calls(folder) if c["pid"] != os.getpid()]  # written inside the trials' ranks
    trials = [t for t in calibration.study.get_trials() if t.user_attrs.get("outcome") == "complete"]
    assert len(trials) >= 3
    seen = set()
    for t in trials:
        hp = t.user_attrs["config"]["hyperparameters"]
        if t.user_attrs["role"] == "search":
            assert {k: t.params[f"hp.{k}"] for k in hp} == hp  # recorded as Optuna params hp.<name>
        models = [c for c in calls if c["call"] == "model" and c["width"] == hp["width"]
                  and c["dropout"] == pytest.approx(hp["dropout"]) and c["activation"] == hp["activation"]]
        assert models, f"trial {t.number}: no rank built a model with {hp}"
        optimizers = [c for c in calls if c["call"] == "optimizer"
                      and c["momentum"] == pytest.approx(hp["optimizer.momentum"])
                      and c["lr"] == pytest.approx(t.user_attrs["config"]["lr"])]
        assert optimizers, f"trial {t.number}: no rank built the optimizer with momentum {hp['optimizer.momentum']}"
        applied = json.loads((Path(t.user_attrs["trial_dir"]) / "applied.json").read_text())
        assert applied["optimizer_kwargs"]["momentum"] == pytest.approx(hp["optimizer.momentum"])
        seen.add(json.dumps(hp, sort_keys=True))
    assert len(seen) >= 3  # the baseline and two searched points at least


@pytest.mark.slow  # the module's calibrated study runs for these
def test_calibrate_returns_the_chosen_hyperparameters(calibrated: tuple[autotune.Calibration, Path]) -> None:
    calibration, _ = calibrated
    hp = calibration.hyperparameters
    assert set(hp) == {"width", "dropout", "activation", "base_lr", "optimizer.momentum"}
    assert calibration.config.base_lr == hp["base_lr"]
    assert calibration.build_kwargs() == {k: hp[k] for k in ("width", "dropout", "activation", "base_lr")}
    assert calibration.optimizer_kwargs() == {"momentum": hp["optimizer.momentum"]}
    chosen = [t for t in calibration.study.get_trials() if t.user_attrs.get("config", {}).get("hyperparameters") == hp]
    assert chosen
    # and in a rank, from JSON
    assert autotune.Calibration.from_json(calibration.to_json()).hyperparameters == hp


@pytest.mark.slow  # the module's calibrated study runs for these
def test_best_and_the_run_summary_show_the_hyperparameters(calibrated: tuple[autotune.Calibration, Path]) -> None:
    calibration, folder = calibrated
    result = CliRunner().invoke(main, ["best", str(folder / "study.yaml"), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["hyperparameters"] == calibration.hyperparameters
    from autotune.cli._run_summary import print_summary
    from autotune.tuner import summarize

    spec = load_spec(folder / "study.yaml")
    out = io.StringIO()
    print_summary(Console(file=out, width=200, color_system=None), summarize(calibration.study, spec))
    text = out.getvalue()
    for name in ("hp.width", "hp.dropout", "hp.base_lr", "hp.optimizer.momentum"):
        assert name in text
    assert "held-out loss (eval_dataset)" in text  # the workload has an eval_dataset


@pytest.mark.slow  # the module's calibrated study runs for these
def test_complete_trials_record_their_held_out_loss(calibrated: tuple[autotune.Calibration, Path]) -> None:
    calibration, _ = calibrated
    complete = [t for t in calibration.study.get_trials() if t.user_attrs.get("outcome") == "complete"]
    assert complete and all(isinstance(t.user_attrs["eval_loss"], float) for t in complete)


def test_base_lr_reaches_a_build_that_takes_it(tmp_path: Path) -> None:
    (tmp_path / "wl.py").write_text(
        "import autotune\n"
        "def build(base_lr=0.1, width=2):\n"
        "    return autotune.Workload(model=lambda: None, dataset=lambda: [], loss=lambda m, b: 0.0, base_lr=base_lr)\n"
    )
    (tmp_path / "study.yaml").write_text(
        "name: x\nworkload: {entrypoint: wl.py:build}\nhyperparameters: {base_lr: {low: 0.01, high: 0.2, log: true}}\n"
    )
    spec = load_spec(tmp_path / "study.yaml", check_workload=False)
    from autotune.workload import load_workload

    workload = load_workload("wl.py:build", {}, tmp_path, {"base_lr": 0.05, "optimizer.eps": 1e-6})
    assert workload.base_lr == 0.05
    assert study_space(spec).default_config().base_lr == 0.1  # the baseline: build()'s own default


def test_the_reference_study_searches_lr_weight_decay_and_batch_on_time_to_loss() -> None:
    spec = load_spec(HERE.parent / "studies" / "hyperparameters.yaml")
    assert [o.metric for o in spec.objectives] == ["time_to_loss"] and spec.objectives[0].target
    space = study_space(spec)
    assert {"hp.base_lr", "hp.optimizer.weight_decay", "batch_size"} <= set(space.distributions())


def test_the_json_schema_accepts_the_hyperparameters_section() -> None:
    import jsonschema

    from autotune.spec import StudySpec, read_yaml

    schema = StudySpec.model_json_schema()
    document = read_yaml((HERE.parent / "studies" / "hyperparameters.yaml").read_text(), "hyperparameters.yaml")
    document["hyperparameters"]["layers"] = {"value": [64, 32]}
    document["hyperparameters"]["optimizer.betas"] = {"choices": [[0.9, 0.999], [0.9, 0.95]]}
    jsonschema.validate(document, schema)
    document["hyperparameters"]["bad"] = {"low": 1, "hihg": 2}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)


def test_calibrate_overrides_on_a_spec_keep_its_hyperparameters_and_fixed_knobs() -> None:
    from autotune.calibration._calibrate import _resolve

    spec = load_spec(HERE.parent / "studies" / "hyperparameters.yaml")
    resolved = _resolve(spec, {"budget__n_trials": 2})  # calibrate(spec, budget__n_trials=2) re-parses a dump
    assert resolved.budget.n_trials == 2
    assert resolved.hyperparameters == spec.hyperparameters
    assert resolved.search_space == spec.search_space  # lr_scaling: sqrt, a fixed knob, survives the dump


def test_grid_points_of_float_hyperparameters() -> None:
    from optuna.distributions import FloatDistribution

    from autotune.samplers import float_grid

    assert float_grid(FloatDistribution(0.0, 0.4)) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert float_grid(FloatDistribution(1e-4, 1e-2, log=True)) == pytest.approx([1e-4, 10**-3.5, 1e-3, 10**-2.5, 1e-2])
    assert float_grid(FloatDistribution(0.0, 0.3, step=0.1)) == pytest.approx([0.0, 0.1, 0.2, 0.3])
