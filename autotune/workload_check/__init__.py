"""Checking a study's workload before any trial: loading a study with its workload checked
(``load_spec``), ``autotune validate``'s build-it-once check and its parts (calling a workload's factories,
a dataset's length, one collated batch), and the warnings validate prints."""

from autotune.workload_check._build import (
    CheckReport,
    call_factory,
    captured_output,
    check_workload,
    collate_batch,
    dataset_len,
    describe_bad_loss,
)
from autotune.workload_check._fits import check_workload_fits, load_spec
from autotune.workload_check._mesh import HF_PLAN, MeshFacts, build_for_facts, mesh_facts
from autotune.workload_check._warnings import knobs_not_decided, native_bf16, study_warnings

__all__ = [
    "HF_PLAN",
    "CheckReport",
    "MeshFacts",
    "build_for_facts",
    "call_factory",
    "captured_output",
    "check_workload",
    "check_workload_fits",
    "collate_batch",
    "dataset_len",
    "describe_bad_loss",
    "knobs_not_decided",
    "load_spec",
    "mesh_facts",
    "native_bf16",
    "study_warnings",
]
