"""Bad study files through the real CLI: exit 2, one line naming the file, the field and the fix.

Every case writes a real study file (and a small workload file beside it) into its own folder, runs
``autotune validate`` on it and checks what a user sees: exit status 2, exactly one line on stderr that
starts with the study file's path, names the field and says how to fix it, no traceback, and nothing new
in the study's folder. A few cases run the CLI as a subprocess (``python -m autotune.cli`` and the
``autotune`` console script); the rest use click's CliRunner on the same command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.errors import StudyFileError
from autotune.workload_check import load_spec

# Workload files written beside every study. They need no torch: validation only checks the contract.
WORKLOAD_PY = """\
import autotune


class Block:
    pass


def _workload(**kw):
    return autotune.Workload(model=lambda: None, dataset=lambda: [], loss=lambda m, b: 0.0, **kw)


def build(hidden=8):
    return _workload(checkpoint_modules=(Block,))


def build_plain():
    return _workload()


def build_raises():
    raise RuntimeError("dataset folder /data/x is missing")


def build_wrong():
    return {"model": None}


def build_bad_lr():
    return _workload(base_lr=0)
"""

# A tiny model with attention heads, a tensor-parallel plan and a pipeline split: what a mesh is checked against.
MESH_PY = """\
import torch

import autotune


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_heads = heads
        self.q = torch.nn.Linear(dim, dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(self.q(x))


class Net(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.blocks = torch.nn.Sequential(Attention(dim, heads), Attention(dim, heads))
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, x):
        return self.head(self.blocks(x))


def _workload(dim, heads, **kw):
    return autotune.Workload(
        model=lambda: Net(dim, heads),
        dataset=lambda: [(torch.ones(dim), torch.tensor(0)) for _ in range(4)],
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
        **kw,
    )


def build(dim=12, heads=6):
    return _workload(dim, heads, tp_plan={"blocks.*.q": "colwise", "blocks.*.proj": "rowwise"},
                     pipeline_split=("blocks.1",), pipeline_loss=torch.nn.functional.cross_entropy)


def build_plain():
    return _workload(12, 6)


def build_bad_plan():
    return _workload(12, 6, tp_plan={"layers.*.q": "colwise"})


def build_sequence_plan():
    return _workload(12, 6, tp_plan={"blocks.*.q": "colwise", "blocks.*.proj": "rowwise", "head": "sequence"})


def build_inner_split():
    return _workload(12, 6, pipeline_split=("blocks.1.q",), pipeline_loss=torch.nn.functional.cross_entropy)


def build_bad_split():
    return _workload(12, 6, tp_plan={"blocks.*.q": "colwise"}, pipeline_split=("blocks.7",),
                     pipeline_loss=torch.nn.functional.cross_entropy)
"""


BROKEN_PY = "import no_such_dependency_for_autotune_tests\n\ndef build():\n    pass\n"

HEAD = "name: probe\nworkload: {entrypoint: 'wl.py:build'}\n"


@dataclass(frozen=True)
class Case:
    """A bad study file: its text, the ``validate`` arguments, and what the one error line must contain."""

    id: str
    text: str
    expect: tuple[str, ...]
    args: tuple[str, ...] = ()
    secret: str | None = None  # must not appear anywhere in the output
    files: dict[str, str] = field(default_factory=dict)


def case(id: str, body: str, *expect: str, head: str = HEAD, **kw: object) -> Case:
    return Case(id, head + textwrap.dedent(body), tuple(expect), **kw)  # type: ignore[arg-type]


# fmt: off
CASES = [
    # -- unknown keys
    case("unknown_top_level_key", "sampler_name: tpe\n", "sampler_name", "unknown key",
         "did you mean 'sampler'"),
    case("unknown_nested_key", "trial: {max_step: 10}\n", "trial.max_step", "did you mean 'max_steps'"),
    case("unknown_knob_did_you_mean", "search_space:\n  batchsize: {low: 8, high: 64}\n",
         "search_space.batchsize", "unknown knob", "did you mean 'batch_size'"),
    case("unknown_knob_lists_knobs", "search_space: {colour: red}\n", "search_space.colour", "knobs are:"),
    case("unknown_range_key", "search_space:\n  batch_size: {low: 8, hihg: 64}\n", "search_space.batch_size",
         "did you mean 'high'"),
    # -- wrong types
    case("string_for_int", "trial: {max_steps: ten}\n", "trial.max_steps", "'ten' is not an integer",
         "give a whole number"),
    case("string_for_int_knob", "search_space: {grad_accum: two}\n", "search_space.grad_accum",
         "give an integer"),
    case("list_for_mapping", "trial: [1, 2]\n", "trial", "expected a mapping", "write key: value pairs"),
    case("list_for_workload_args", "", "workload.args", "expected a mapping",
         head="name: probe\nworkload: {entrypoint: 'wl.py:build', args: [1, 2]}\n"),
    case("mapping_for_list", "objectives: {metric: loss}\n", "objectives", "expected a list", "write a list"),
    case("number_for_bool_knob", "search_space: {pin_memory: 1}\n", "search_space.pin_memory",
         "give true or false"),
    case("number_for_bool_log", "search_space:\n  batch_size: {low: 8, high: 64, log: 1}\n",
         "search_space.batch_size", "log: 1 is not true or false", "give true or false"),
    case("string_for_float", "trial: {max_seconds: soon}\n", "trial.max_seconds", "give a number"),
    case("non_string_key", "1: one\n", "keys must be strings", "quote the key"),
    # -- ranges and choices
    case("low_greater_than_high", "search_space:\n  batch_size: {low: 512, high: 64}\n",
         "search_space.batch_size", "low (512) is greater than high (64)", "make low <= high"),
    case("empty_choices", "search_space:\n  amp: {choices: []}\n", "search_space.amp", "choices is empty",
         "at least one"),
    case("invalid_choice_value", "search_space:\n  amp: {choices: [off, fp8]}\n", "search_space.amp",
         "choices[1]", "'fp8'", "one of 'off', 'bf16', 'fp16'"),
    case("duplicate_choice", "search_space:\n  grad_accum: {choices: [1, 1]}\n", "search_space.grad_accum",
         "twice", "list each value once"),
    case("bare_list_knob", "search_space:\n  grad_accum: [1, 2, 4]\n", "search_space.grad_accum",
         "write {choices: [1, 2, 4]}"),
    case("range_for_categorical", "search_space:\n  amp: {low: 1, high: 2}\n", "search_space.amp",
         "not a range"),
    case("log_range_from_zero", "search_space:\n  num_workers: {low: 0, high: 4, log: true}\n",
         "search_space.num_workers", "low >= 1", "drop log"),
    case("knob_without_value", "search_space:\n  amp:\n", "search_space.amp", "no value given",
         "remove the key"),
    # -- sizes
    case("max_steps_zero", "trial: {max_steps: 0}\n", "trial.max_steps", "at least 1"),
    case("max_seconds_negative", "trial: {max_seconds: -1}\n", "trial.max_seconds", "above 0"),
    case("batch_size_low_zero", "search_space:\n  batch_size: {low: 0, high: 64}\n",
         "search_space.batch_size", "below the minimum 1", "give an integer >= 1"),
    case("warmup_not_below_max_steps", "trial: {warmup_steps: 5, max_steps: 5}\n", "trial",
         "warmup_steps (5) must be below max_steps (5)", "lower warmup_steps"),
    case("warmup_mode_unknown", "trial: {warmup: slow}\n", "trial.warmup", "'slow' is not valid",
         "use 'steady' or 'fixed'"),
    case("warmup_cap_below_min", "trial: {warmup_steps: 5, warmup_max_steps: 4}\n", "trial",
         "warmup_max_steps (4) must be at least warmup_steps (5)", "change warmup_max_steps"),
    case("warmup_cap_with_fixed", "trial: {warmup: fixed, warmup_max_steps: 10}\n", "trial",
         "warmup_max_steps only applies to warmup: steady"),
    case("settle_tolerance_zero", "trial: {settle_tolerance: 0}\n", "trial.settle_tolerance", "above 0"),
    case("budget_zero_trials", "budget: {n_trials: 0}\n", "budget.n_trials", "at least 1"),
    case("percentile_out_of_range", "pruner: {name: percentile, percentile: 100}\n", "pruner.percentile",
         "below 100"),
    # -- objectives, sampler, pruner, launcher
    case("unknown_metric", "objectives:\n  - {metric: accuracy}\n", "objectives[0].metric", "'accuracy'",
         "use 'throughput'"),
    case("unknown_direction", "objectives:\n  - {metric: loss, direction: down}\n",
         "objectives[0].direction", "'down'", "use 'maximize' or 'minimize'"),
    case("throughput_minimize", "objectives:\n  - {metric: throughput, direction: minimize}\n",
         "objectives[0]", "set direction: maximize"),
    case("no_objectives", "objectives: []\n", "objectives", "at least one"),
    case("duplicate_objectives", "objectives:\n  - {metric: loss}\n  - {metric: loss}\n", "objectives",
         "listed twice", "list each metric once"),
    case("cmaes_two_objectives",
         "sampler: {name: cmaes}\nobjectives:\n  - {metric: throughput}\n  - {metric: loss}\n",
         "sampler.name", "cmaes", "use nsga2"),
    case("unknown_sampler", "sampler: {name: bayes}\n", "sampler.name", "'bayes'", "use 'tpe'"),
    case("unknown_pruner", "pruner: {name: asha}\n", "pruner.name", "'asha'", "'hyperband'"),
    case("unknown_launcher_kind", "launcher: {kind: k8s}\n", "launcher.kind", "'k8s'",
         "use 'local' or 'slurm'"),
    case("unknown_device", "launcher: {device: tpu}\n", "launcher.device", "'tpu'", "'cuda'"),
    case("slurm_key_with_local", "launcher: {kind: local, partition: gpu}\n", "launcher",
         "partition only applies to kind: slurm", "set kind: slurm"),
    case("slurm_nodes_with_local", "launcher: {nodes: 2}\n", "launcher", "nodes only applies to kind: slurm",
         "remove it"),
    case("fp16_on_cpu", "launcher: {device: cpu}\nsearch_space: {amp: fp16}\n", "search_space.amp",
         "fp16 needs CUDA", "launcher.device: cuda"),
    case("fp16_choice_on_cpu", "search_space:\n  amp: {choices: [off, fp16]}\n", "search_space.amp",
         "fp16 needs CUDA", "remove fp16"),
    case("pin_memory_on_cpu", "search_space: {pin_memory: true}\n", "search_space.pin_memory", "CUDA",
         "remove true"),
    case("baseline_unknown_knob", "baseline: {bach_size: 32}\n", "baseline", "did you mean 'batch_size'"),
    # -- storage
    case("storage_not_a_url", "storage: not a url\n", "storage", "is not a database URL", "sqlite:///"),
    case("storage_unsupported_database", "storage: 'oracle://scott@db.example/orcl'\n", "storage",
         "unsupported database 'oracle'", "use sqlite, postgresql"),
    case("storage_sqlite_without_file", "storage: 'sqlite://'\n", "storage", "needs a file",
         "sqlite:///path"),
    case("storage_postgres_password_no_host", "storage: 'postgresql+psycopg://bob:hunter2@/autotune'\n",
         "storage", "needs a host", "user@host", secret="hunter2"),
    case("storage_postgres_password_bad_port",
         "storage: 'postgresql+psycopg://bob:hunter2@db.example:fivefourthreetwo/autotune'\n",
         "storage", "not a database URL", "bob:***@", secret="hunter2"),
    # -- the document itself
    case("yaml_syntax_error", "trial: {max_steps: 10\nsampler: {name: tpe}\n", "line 4, column 8",
         "fix the YAML syntax"),
    case("yaml_bad_indent", "trial:\n  max_steps: 5\n   warmup_steps: 1\n", "line 5, column 16",
         "mapping values are not allowed here", "fix the YAML syntax"),
    case("document_is_a_list", "- name: probe\n- workload: x\n", "is a list, not a mapping", "name:",
         head=""),
    case("document_is_a_scalar", "just some words\n", "is a string, not a mapping", head=""),
    case("empty_file", "", "the file is empty", "write a study", head=""),
    case("only_comments", "# name: probe\n# workload: x\n", "the file is empty", head=""),
    case("missing_workload", "trial: {max_steps: 5}\n", "workload", "required key is missing", "add it",
         head="name: probe\n"),
    case("unsafe_name_parent", "", "name", "'../x' is not a safe study name", "use letters",
         head="name: ../x\nworkload: {entrypoint: 'wl.py:build'}\n"),
    case("unsafe_name_space", "", "name", "not a safe study name",
         head="name: my study\nworkload: {entrypoint: 'wl.py:build'}\n"),
    case("unsafe_name_hidden", "", "name", "'.hidden' is not a safe study name", "starting with a letter or digit",
         head="name: .hidden\nworkload: {entrypoint: 'wl.py:build'}\n"),
    case("name_is_a_number", "", "name", "not a string", "quote it",
         head="name: 42\nworkload: {entrypoint: 'wl.py:build'}\n"),
    # -- YAML tags: rejected, never executed
    case("tag_python_apply_os_system", "", "python/object/apply:os.system", "not allowed", "plain data",
         head='name: !!python/object/apply:os.system ["touch PWNED"]\nworkload: {entrypoint: x:y}\n'),
    case("tag_python_object_new", "", "python/object/new:subprocess.Popen", "not allowed",
         head='name: probe\nworkload: !!python/object/new:subprocess.Popen [["touch", "PWNED"]]\n'),
    case("tag_python_name", "", "python/name:os.system", "not allowed",
         head="name: probe\nworkload: {entrypoint: !!python/name:os.system ''}\n"),
    case("tag_custom_local", "", "'!env'", "not allowed",
         head="name: !env USER\nworkload: {entrypoint: x:y}\n"),
    # -- the workload
    case("entrypoint_malformed", "", "workload.entrypoint", "'wl.py'", "module:function",
         head="name: probe\nworkload: {entrypoint: 'wl.py'}\n"),
    case("entrypoint_missing_module", "", "workload.entrypoint", "no module named 'no_such_pkg_for_tests'",
         "check the module path",
         head="name: probe\nworkload: {entrypoint: 'no_such_pkg_for_tests.mod:build'}\n"),
    case("entrypoint_missing_function", "", "workload.entrypoint", "no 'biuld'", "did you mean 'build'",
         head="name: probe\nworkload: {entrypoint: 'wl.py:biuld'}\n"),
    case("entrypoint_module_missing_function", "", "workload.entrypoint", "did you mean 'load'",
         head="name: probe\nworkload: {entrypoint: 'json:loadz'}\n"),
    case("entrypoint_file_missing", "", "workload.entrypoint", "does not exist", "relative to the study file",
         head="name: probe\nworkload: {entrypoint: 'models/net.py:build'}\n"),
    case("entrypoint_raises", "", "workload.entrypoint", "RuntimeError: dataset folder /data/x is missing",
         "--debug shows the traceback", head="name: probe\nworkload: {entrypoint: 'wl.py:build_raises'}\n"),
    case("entrypoint_wrong_return_type", "", "workload.entrypoint", "returned dict, not autotune.Workload",
         "return autotune.Workload(", head="name: probe\nworkload: {entrypoint: 'wl.py:build_wrong'}\n"),
    case("entrypoint_bad_workload_field", "", "workload.entrypoint", "base_lr must be a positive number",
         head="name: probe\nworkload: {entrypoint: 'wl.py:build_bad_lr'}\n"),
    case("entrypoint_import_error", "", "workload.entrypoint",
         "importing broken.py raised ModuleNotFoundError", "fix the workload",
         head="name: probe\nworkload: {entrypoint: 'broken.py:build'}\n", files={"broken.py": BROKEN_PY}),
    case("entrypoint_unexpected_arg", "", "workload.args.depth", "build() takes no argument 'depth'",
         "its parameters: hidden",
         head="name: probe\nworkload: {entrypoint: 'wl.py:build', args: {depth: 3}}\n"),
    case("checkpointing_without_modules",
         "search_space:\n  activation_checkpointing: {choices: [false, true]}\n",
         "search_space.activation_checkpointing", "declares no checkpoint_modules",
         "fix this knob to false", head="name: probe\nworkload: {entrypoint: 'wl.py:build_plain'}\n"),
    # -- --set overrides
    case("set_without_equals", "", "--set", "expected key=value", "e.g. --set trial.max_steps=20",
         args=("--set", "trial.max_steps")),
    case("set_wrong_type", "", "trial.max_steps", "'abc' is not an integer",
         args=("--set", "trial.max_steps=abc")),
    case("set_into_scalar", "", "--set name.x", "'name' is not a mapping", "such as trial",
         args=("--set", "name.x=1")),
    case("set_unknown_key", "", "trial.max_stepz", "did you mean 'max_steps'",
         args=("--set", "trial.max_stepz=3")),
    case("set_bad_yaml", "", "--set search_space.amp", "fix the YAML syntax",
         args=("--set", "search_space.amp=[off, bf16")),
    # -- constraints.global_batch: an integer or {choices: [...]} of integers, with a feasible split each
    case("global_batch_not_integer", "constraints: {global_batch: two}\n", "constraints.global_batch",
         "'two' is not an integer", "global_batch: 256"),
    case("global_batch_zero", "constraints: {global_batch: 0}\n", "constraints.global_batch", "0 is below 1"),
    case("global_batch_bool", "constraints: {global_batch: true}\n", "constraints.global_batch",
         "True is not an integer"),
    case("global_batch_float", "constraints: {global_batch: 256.5}\n", "constraints.global_batch",
         "256.5 is not an integer"),
    case("global_batch_empty_choices", "constraints: {global_batch: {choices: []}}\n", "constraints.global_batch",
         "non-empty list of integers"),
    case("global_batch_choice_not_integer", "constraints: {global_batch: {choices: [256, big]}}\n",
         "constraints.global_batch", "choices[1]: 'big' is not an integer"),
    case("global_batch_choice_twice", "constraints: {global_batch: {choices: [256, 256]}}\n",
         "constraints.global_batch", "lists a value twice"),
    case("global_batch_range", "constraints: {global_batch: {low: 128, high: 512}}\n", "constraints.global_batch",
         "takes an integer or {choices: [...]}"),
    case("global_batch_bare_list", "constraints: {global_batch: [256, 512]}\n", "constraints.global_batch",
         "write {choices: [256, 512]}"),
    case("global_batch_no_split", """\
         search_space: {batch_size: {choices: [16, 32]}, world_size: {choices: [1, 2]}}
         constraints: {global_batch: 100}
         """, "constraints.global_batch", "no split batch_size x grad_accum x world_size", "makes 100",
         "e.g. {choices: [100, 50]}", "search grad_accum",
         args=("--no-build",)),
    case("global_batch_indivisible", """\
         search_space: {batch_size: {low: 8, high: 64}, grad_accum: 2, world_size: 2}
         constraints: {global_batch: 66}
         """, "constraints.global_batch", "makes 66", "no grad_accum x world_size here divides 66",
         args=("--no-build",)),
    case("global_batch_one_choice_without_split", """\
         search_space: {batch_size: {choices: [32, 64]}, grad_accum: {choices: [1, 2]}}
         constraints: {global_batch: {choices: [64, 1000]}}
         """, "constraints.global_batch", "makes 1000",
         args=("--no-build",)),
    case("global_batch_baseline_outside", """\
         search_space: {batch_size: {choices: [32, 64]}, grad_accum: {choices: [1, 2]}}
         constraints: {global_batch: 64}
         baseline: {world_size: 2}
         """, "baseline:", "world_size 2 is no split of the held global batch 64", "64x1x1, 32x2x1",
         args=("--no-build",)),
    # -- the parallel mesh: refused before launch when it cannot run on the model
    *[case(f"mesh_{id}", body, *expect, head=f"name: probe\nworkload: {{entrypoint: {entry}}}\n",
           files={"mesh.py": MESH_PY})
      for id, entry, body, *expect in (
        ("degrees_not_dividing", "'mesh.py:build'", "search_space: {world_size: 3, tensor_parallel: 2}\n",
         "search_space", "tensor_parallel x pipeline_parallel (2 x 1) does not divide world_size (3)"),
        ("tp_not_dividing_heads", "'mesh.py:build'", "search_space: {world_size: 4, tensor_parallel: 4}\n",
         "tensor_parallel 4 does not divide the model's", "num_heads (6)", "e.g. 3"),
        ("tp_not_dividing_dims", "'mesh.py:build', args: {dim: 6, heads: 4}",
         "search_space: {world_size: 4, tensor_parallel: 4}\n", "tensor_parallel 4 does not divide the model's",
         "blocks.0.q.out_features (6)"),
        ("tp_without_plan", "'mesh.py:build_plain'", "search_space: {world_size: 2, tensor_parallel: 2}\n",
         "tensor_parallel 2", "add Workload.tp_plan", "Workload.parallelize"),
        ("pp_without_split", "'mesh.py:build_plain'", "search_space: {world_size: 2, pipeline_parallel: 2}\n",
         "pipeline_parallel 2", "add Workload.pipeline_split", "Workload.pipeline_loss"),
        ("too_many_stages", "'mesh.py:build'", "search_space: {world_size: 4, pipeline_parallel: 4}\n",
         "pipeline_parallel 4 needs 4 stages", "makes at most 2"),
        ("microbatches_below_stages", "'mesh.py:build'",
         "search_space: {world_size: 2, pipeline_parallel: 2, pipeline_microbatches: 1}\n",
         "pipeline_microbatches 1 is below pipeline_parallel 2", "1f1b"),
        ("interleaved_one_stage_a_rank", "'mesh.py:build'",
         "search_space: {world_size: 2, pipeline_parallel: 2, pipeline_schedule: interleaved_1f1b}\n",
         "needs 4 stages (interleaved_1f1b runs two stages a rank)"),
        ("batch_not_split", "'mesh.py:build'",
         "search_space: {world_size: 2, pipeline_parallel: 2, pipeline_microbatches: 4, batch_size: 6}\n",
         "batch_size 6 does not split into 4 micro-batches"),
        ("ddp_knob_beside_tp", "'mesh.py:build'",
         "search_space: {world_size: 2, tensor_parallel: 2, bucket_cap_mb: 50}\n",
         "search_space.bucket_cap_mb", "applies to DDP only", "tensor_parallel 2 runs no DDP"),
        ("static_graph_beside_pp", "'mesh.py:build'",
         "search_space: {world_size: 2, pipeline_parallel: 2, static_graph: true}\n",
         "search_space.static_graph", "applies to DDP only"),
        ("compile_beside_tp", "'mesh.py:build'",
         "search_space: {world_size: 2, tensor_parallel: 2, compile: default}\ntrial: {warmup_steps: 1}\n",
         "search_space.compile", "does not combine with tensor_parallel 2", "compile: off"),
        ("none_feasible", "'mesh.py:build'",
         "search_space: {world_size: {choices: [3, 5]}, tensor_parallel: {choices: [2, 4]}}\n",
         "no mesh of the search space can run", "does not divide world_size"),
        ("baseline_infeasible", "'mesh.py:build'",
         "search_space: {world_size: {choices: [1, 2]}, tensor_parallel: {choices: [1, 2]}}\n"
         "baseline: {world_size: 4, tensor_parallel: 4}\n", "baseline:", "tensor_parallel 4 does not divide"),
        ("plan_matches_nothing", "'mesh.py:build_bad_plan'", "search_space: {world_size: 2, tensor_parallel: 2}\n",
         "Workload.tp_plan", "'layers.*.q' matches no module"),
        ("fp16_beside_pipeline", "'mesh.py:build'",
         "launcher: {device: cuda}\nsearch_space: {world_size: 2, pipeline_parallel: {choices: [1, 2]}, "
         "amp: {choices: [off, fp16]}}\n", "search_space.amp", "fp16 cannot meet pipeline_parallel above 1"),
        ("sequence_plan_without_hook", "'mesh.py:build_sequence_plan'",
         "search_space: {world_size: 2, tensor_parallel: 2}\n", "tensor_parallel 2",
         "sequence entries need a parallelize hook", "add Workload.parallelize"),
        ("split_inside_a_block", "'mesh.py:build_inner_split'",
         "search_space: {world_size: 2, pipeline_parallel: 2}\n", "Workload.pipeline_split",
         "cannot start a stage at 'blocks.1.q'", "e.g. 'blocks', 'blocks.0'"),
        ("split_names_no_module", "'mesh.py:build_bad_split'",
         "search_space: {world_size: 2, pipeline_parallel: 2}\n", "Workload.pipeline_split",
         "no module 'blocks.7'"),
    )],
]
# fmt: on

assert len({c.id for c in CASES}) == len(CASES)
assert len(CASES) >= 35

# These also run as real subprocesses (python -m autotune.cli, and the console script).
SUBPROCESS_CASES = {
    "unknown_knob_did_you_mean",
    "low_greater_than_high",
    "yaml_syntax_error",
    "tag_python_apply_os_system",
    "storage_postgres_password_no_host",
    "entrypoint_missing_function",
    "checkpointing_without_modules",
}


def write_study(folder: Path, c: Case) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wl.py").write_text(WORKLOAD_PY)
    for name, text in c.files.items():
        (folder / name).write_text(text)
    study = folder / "study.yaml"
    study.write_text(c.text)
    return study


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def check_error_line(stderr: str, stdout: str, study: Path, c: Case) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    line = lines[0]
    assert line.startswith(f"error: {study}: "), line
    for fragment in c.expect:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert "Traceback" not in stderr + stdout
    assert stdout == "", "nothing should be printed on stdout when the study is invalid"
    if c.secret:
        assert c.secret not in stderr + stdout


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_study_file_in_process(c: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "study"
    study = write_study(folder, c)
    monkeypatch.chdir(folder)  # so that a command that got executed would write PWNED here
    before = listing(folder)
    result = CliRunner().invoke(main, ["validate", str(study), *c.args])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    check_error_line(result.stderr, result.stdout, study, c)
    assert listing(folder) == before, "validate must not write anything into the study's folder"
    assert not (folder / "PWNED").exists()


@pytest.mark.parametrize("via", ["module", "console_script"])
@pytest.mark.parametrize("c", [c for c in CASES if c.id in SUBPROCESS_CASES], ids=lambda c: c.id)
def test_bad_study_file_subprocess(c: Case, via: str, tmp_path: Path) -> None:
    if via == "module":
        command = [sys.executable, "-m", "autotune.cli"]
    else:
        script = shutil.which("autotune") or str(Path(sys.executable).parent / "autotune")
        if not Path(script).exists():
            pytest.fail("the autotune console script is not installed (pip install -e .)")
        command = [script]
    folder = tmp_path / "study"
    write_study(folder, c)
    before = listing(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [*command, "validate", "study.yaml", *c.args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    check_error_line(proc.stderr, proc.stdout, Path("study.yaml"), c)
    assert listing(folder) == before
    assert not (folder / "PWNED").exists()


def test_missing_study_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "study.yaml"
    result = CliRunner().invoke(main, ["validate", str(missing)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {missing}: no such file; check the path"]
    assert not missing.parent.exists()


def test_folder_instead_of_file(tmp_path: Path) -> None:
    before = listing(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: {tmp_path}: is a folder; give the study .yaml file"]
    assert listing(tmp_path) == before


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    """--debug is the way to a traceback; without it the same error is one line (see above)."""
    c = next(c for c in CASES if c.id == "entrypoint_raises")
    study = write_study(tmp_path, c)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "--debug", "validate", str(study)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "WorkloadError" in proc.stderr


def test_a_ragged_stepped_range_is_refused_with_both_neighbours(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(
        "name: s\nworkload: {entrypoint: a.b:c}\nsearch_space:\n  batch_size: {low: 16, high: 100, step: 16}\n"
    )
    with pytest.raises(StudyFileError, match=r"search_space\.batch_size: .*use high: 96 or 112"):
        load_spec(study, check_workload=False)
