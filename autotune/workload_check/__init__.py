"""Checking a study's workload before any trial: loading a study with its workload checked
(``load_spec``), ``autotune validate``'s build-it-once check, the warnings validate prints, and the study's
fingerprint (machine, software, model) that warm starts match on."""

from autotune.workload_check._build import CheckReport, captured_output, check_workload, describe_bad_loss
from autotune.workload_check._fingerprint import (
    Comparison,
    compare_fingerprints,
    cpu_model,
    describe_batch,
    describe_fingerprint,
    hardware_facts,
    software_facts,
    study_fingerprint,
    workload_facts,
)
from autotune.workload_check._fits import check_workload_fits, load_spec
from autotune.workload_check._warnings import knobs_not_decided, native_bf16, study_warnings

__all__ = [
    "CheckReport",
    "Comparison",
    "captured_output",
    "check_workload",
    "check_workload_fits",
    "compare_fingerprints",
    "cpu_model",
    "describe_bad_loss",
    "describe_batch",
    "describe_fingerprint",
    "hardware_facts",
    "knobs_not_decided",
    "load_spec",
    "native_bf16",
    "software_facts",
    "study_fingerprint",
    "study_warnings",
    "workload_facts",
]
