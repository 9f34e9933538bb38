"""Valid study files through ``autotune validate`` and ``autotune schema``: exit 0, the resolved summary."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from autotune.cli import main
from autotune.cli._validate import render_resolved_study as render_summary
from autotune.knobs import KNOBS
from autotune.spec import Choices, Fixed, IntRange, read_yaml
from autotune.workload_check import load_spec

WORKLOAD_PY = """\
import torch
from torch import nn

import autotune


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


def build(hidden=8, depth=2):
    width = min(hidden, 16)
    return autotune.Workload(
        model=lambda: nn.Sequential(*[Block(width) for _ in range(depth)], nn.Linear(width, 1)),
        dataset=lambda: torch.utils.data.TensorDataset(torch.randn(64, width), torch.randn(64, 1)),
        loss=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]),
        base_lr=2e-3, base_batch_size=32, checkpoint_modules=(Block,),
    )
"""

# DESIGN.md's example, with a workload file beside it instead of the built-in MLP.
EXAMPLE = """\
name: mlp-quickstart
storage: sqlite:///db/mlp-quickstart.db
workload:
  entrypoint: models/net.py:build
  args: {hidden: 512, depth: 4}
launcher:
  kind: local
  device: cpu
search_space:
  batch_size: {low: 16, high: 512, log: true}
  grad_accum: {choices: [1, 2, 4]}
  lr_scaling: {choices: [none, linear, sqrt]}
  num_workers: {low: 0, high: 4}
  prefetch_factor: {choices: [2, 4, 8]}
  pin_memory: {choices: [false]}
  amp: {choices: [off, bf16]}
  activation_checkpointing: {choices: [false, true]}
  bucket_cap_mb: {choices: [1, 5, 25, 100]}
  world_size: {choices: [1, 2]}
trial:
  warmup_steps: 3
  max_steps: 40
  max_seconds: 60
  samples: 20000
objectives:
  - {metric: throughput, direction: maximize}
  - {metric: peak_memory_mb, direction: minimize}
  - {metric: loss, direction: minimize}
constraints:
  max_memory_mb: 8000
sampler: {name: tpe, seed: 0}
pruner: {name: hyperband}
budget: {n_trials: 30, timeout_s: 900}
"""


def write_example(folder: Path, text: str = EXAMPLE) -> Path:
    (folder / "models").mkdir(parents=True, exist_ok=True)
    (folder / "models" / "net.py").write_text(WORKLOAD_PY)
    study = folder / "study.yaml"
    study.write_text(text)
    return study


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def summary_text(study: Path, *overrides: str) -> str:
    """The summary as a user sees it, rendered wide so that long paths are not wrapped."""
    out = io.StringIO()
    render_summary(load_spec(study, overrides=overrides), Console(file=out, width=250, color_system=None))
    return out.getvalue()


def knob_rows(text: str) -> dict[str, list[str]]:
    """The knob table of a summary: knob -> [mode, values, default]."""
    return {
        line.split("│")[0].strip(): [cell.strip() for cell in line.split("│")[1:]]
        for line in text.splitlines()
        if "│" in line
    }


def test_valid_study_validates_and_writes_nothing(tmp_path: Path) -> None:
    study = write_example(tmp_path)
    before = listing(tmp_path)
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    for knob in KNOBS:
        assert knob in result.stdout
    assert "mlp-quickstart" in result.stdout
    assert listing(tmp_path) == before  # no database, no runs/ folder, no __pycache__


def test_valid_study_via_subprocess(tmp_path: Path) -> None:
    study = write_example(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["COLUMNS"] = "200"
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "validate", study.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "batch_size" in proc.stdout and "16..512 log" in proc.stdout
    assert listing(tmp_path) == ["models", "models/net.py", "study.yaml"]


def test_summary_shows_the_resolved_study(tmp_path: Path) -> None:
    text = summary_text(write_example(tmp_path))
    db = (tmp_path / "db" / "mlp-quickstart.db").resolve()
    assert f"sqlite:///{db}" in text  # relative to the study file, not the working directory
    assert "models/net.py:build(hidden=512, depth=4)" in text
    assert "base_lr 0.002 at global batch 32" in text
    assert "local, device cpu" in text
    assert "throughput (maximize), peak_memory_mb (minimize), loss (minimize)" in text
    assert "max_memory_mb 8000" in text
    assert "tpe, seed 0" in text
    assert "30 trials, 900 s" in text
    assert "top 3 re-run 2 time(s)" in text
    rows = knob_rows(text)
    assert rows["batch_size"] == ["searched", "16..512 log", "32"]
    assert rows["grad_accum"] == ["searched", "{1, 2, 4}", "1"]
    assert rows["lr_scaling"] == ["searched", "{none, linear, sqrt}", "sqrt"]
    assert rows["prefetch_factor"] == ["searched", "{2, 4, 8} when num_workers > 0", "2"]
    assert rows["pin_memory"] == ["fixed", "{false}", "false"]
    assert rows["amp"] == ["searched", "{off, bf16}", "off"]
    assert rows["world_size"] == ["searched", "{1, 2}", "1"]


def test_summary_of_defaults_and_fixed_values(tmp_path: Path) -> None:
    study = write_example(
        tmp_path,
        "name: small\nworkload: {entrypoint: 'models/net.py:build'}\n"
        "search_space: {amp: bf16, bucket_cap_mb: 5}\nconfirm: {top_k: 0}\nbudget: {n_trials: null}\n",
    )
    text = summary_text(study)
    assert f"sqlite:///{(tmp_path / 'small.db').resolve()}" in text  # default: beside the study file
    rows = knob_rows(text)
    assert rows["amp"] == ["fixed", "bf16", "off"]
    assert rows["bucket_cap_mb"] == ["fixed", "5", "25"]
    assert rows["batch_size"] == ["fixed", "32", "32"]  # the workload's base batch
    assert rows["prefetch_factor"][1] == "- (unused: num_workers is 0)"
    assert "confirm off" in " ".join(text.split())
    assert "budget unlimited" in " ".join(text.split())


def test_summary_hides_the_storage_password(tmp_path: Path) -> None:
    study = write_example(
        tmp_path,
        "name: pg\nstorage: postgresql+psycopg://tuner:hunter2@db.example:5432/autotune\n"
        "workload: {entrypoint: 'models/net.py:build'}\n",
    )
    text = summary_text(study)
    assert "postgresql+psycopg://tuner:***@db.example:5432/autotune" in text
    assert "hunter2" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what device auto does without a GPU")
def test_device_auto_without_gpu_drops_cuda_only_values_with_a_note(tmp_path: Path) -> None:
    study = write_example(
        tmp_path,
        "name: auto\nworkload: {entrypoint: 'models/net.py:build'}\nlauncher: {device: auto}\n"
        "search_space:\n  amp: {choices: [off, fp16]}\n  pin_memory: true\n",
    )
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 0, result.stderr
    text = summary_text(study)
    assert "local, device cpu (auto)" in text
    assert "amp: fp16 needs CUDA; dropped from the choices on this device" in text
    assert "pin_memory: True needs CUDA; using False on this device" in text
    rows = knob_rows(text)
    assert rows["amp"] == ["fixed", "{off}", "off"]
    assert rows["pin_memory"] == ["fixed", "false", "false"]


def test_yes_no_off_stay_strings(tmp_path: Path) -> None:
    """Only true/false are booleans: YAML 1.1 would read `amp: off` as false and `name: yes` as true."""
    study = write_example(
        tmp_path,
        "name: yes\nworkload: {entrypoint: 'models/net.py:build', args: {hidden: on}}\n"
        "search_space:\n  amp: off\n  lr_scaling: {choices: [none, linear]}\n",
    )
    spec = load_spec(study, check_workload=False)
    assert spec.name == "yes"
    assert spec.workload.args == {"hidden": "on"}
    assert spec.search_space.amp == Fixed(value="off")
    assert spec.search_space.lr_scaling == Choices(choices=("none", "linear"))
    bad = write_example(tmp_path, "name: x\nworkload: {entrypoint: 'models/net.py:build'}\n"
                                  "search_space: {activation_checkpointing: no}\n")
    result = CliRunner().invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "'no' is not true or false; give true or false" in result.stderr


def test_set_overrides(tmp_path: Path) -> None:
    study = write_example(tmp_path)
    spec = load_spec(
        study,
        overrides=["trial.max_steps=10", "search_space.batch_size={low: 8, high: 64}", "sampler.name=random"],
    )
    assert spec.trial.max_steps == 10
    assert spec.search_space.batch_size == IntRange(low=8, high=64)
    assert spec.sampler.name == "random"
    assert spec.trial.warmup_steps == 3  # untouched keys keep the file's values
    result = CliRunner().invoke(main, ["validate", str(study), "--set", "trial.max_steps=10"])
    assert result.exit_code == 0, result.stderr
    assert "max_steps 10" in " ".join(result.stdout.split())
    assert study.read_text() == EXAMPLE  # an override never edits the file


def test_schema_is_json_schema_that_accepts_the_example(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    example = read_yaml(EXAMPLE, "example")  # autotune's loader: `off` stays a string
    assert list(validator.iter_errors(example)) == []
    for bad in (
        {**example, "sampler_name": "tpe"},
        {**example, "trial": {"max_steps": "ten"}},
        {**example, "search_space": {"amp": "fp8"}},
        {**example, "search_space": {"batchsize": 4}},
        {k: v for k, v in example.items() if k != "workload"},
        {**example, "constraints": {"global_batch": 0}},
        {**example, "constraints": {"global_batch": {"choices": []}}},
        {**example, "constraints": {"global_batch": {"low": 64, "high": 256}}},
    ):
        assert list(validator.iter_errors(bad)), bad
    for held in (256, {"choices": [256, 512]}):
        assert list(validator.iter_errors({**example, "constraints": {"global_batch": held}})) == []


def test_every_knob_is_in_the_schema() -> None:
    result = CliRunner().invoke(main, ["schema"])
    knobs = json.loads(result.stdout)["$defs"]["SearchSpaceSpec"]["properties"]
    assert set(knobs) == set(KNOBS)


def test_summary_says_which_trials_evaluate_the_held_out_set(tmp_path: Path) -> None:
    quickstart = Path(__file__).resolve().parent.parent / "studies" / "quickstart.yaml"  # the MLP has an eval_dataset
    assert "held-out loss in confirmation runs" in summary_text(quickstart)  # a speed study: trial.evaluate auto
    assert "held-out loss after every trial" in summary_text(quickstart, "trial.evaluate=always")
    assert "held-out loss" not in summary_text(quickstart, "trial.evaluate=never")
    assert "held-out loss" not in summary_text(write_example(tmp_path))  # no eval_dataset: nothing to evaluate


def test_summary_lists_the_feasible_splits_of_a_held_global_batch(tmp_path: Path) -> None:
    study = write_example(tmp_path)
    text = summary_text(study, "constraints.global_batch=256")
    assert ("global batch 256 held: 6 feasible splits (batch_size x grad_accum x world_size), searched as "
            "batch_split: 256x1x1, 128x2x1, 64x4x1, 128x1x2, 64x2x2, 32x4x2\n") in text
    assert "max_memory_mb 8000, global_batch 256" in text
    assert "base_lr 0.002 in every trial (global batch held: lr_scaling not applied)" in text
    rows = knob_rows(text)
    assert rows["batch_size"] == ["split", "16..512 log", "256"]  # the default: the baseline's split, 256x1x1
    assert rows["grad_accum"] == ["split", "{1, 2, 4}", "1"]
    assert rows["world_size"] == ["split", "{1, 2}", "1"]
    assert rows["lr_scaling"] == ["fixed", "none", "sqrt"]
    assert "note lr_scaling: not applied: the global batch is held (constraints.global_batch)" in text
    # one split: said, with how to vary it
    one = summary_text(study, "constraints.global_batch=48", "search_space.grad_accum=1", "search_space.world_size=1")
    assert ("global batch 48 held: one feasible split (batch_size x grad_accum x world_size), 48x1x1; search "
            "batch_size, grad_accum or world_size to vary it") in one
    assert knob_rows(one)["batch_size"] == ["fixed by the split", "16..512 log", "48"]


def test_a_held_global_batch_without_a_split_exits_2_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    study = write_example(tmp_path)
    before = listing(tmp_path)
    result = CliRunner().invoke(main, ["validate", str(study), "--set", "constraints.global_batch=1000",
                                       "--set", "search_space.batch_size={choices: [16, 32]}"])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {study}: constraints.global_batch: no split batch_size x grad_accum x world_size of the search space "
        "(batch_size {16, 32}, grad_accum {1, 2, 4}, world_size {1, 2}) makes 1000; let batch_size reach 1000 / "
        "(grad_accum x world_size), e.g. {choices: [1000, 500, 250, 125]}"
    ]
    assert listing(tmp_path) == before
