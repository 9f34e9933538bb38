"""What a fresh rank imports before its first step: every torchrun rank, SLURM step and zygote pays it.

scipy (stats and optimize: 0.8 s of a 2.8 s start on a 2-core machine) serves the scale model's fits and the
noise scale's interval, which run in the tuner after a trial, never in a rank: it is imported where it is used
(tests/scale/test_noise_estimator.py and test_throughput_model.py run those).
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["autotune.trial_runner.worker", "autotune.trial_runner._training", "autotune.cli._run_summary", "autotune.scale"],
)
def test_a_fresh_process_importing_the_rank_program_or_the_summary_loads_no_scipy(module: str) -> None:
    program = f"import sys, {module}; print('scipy' in sys.modules, {module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"], out.stdout  # the module imported, scipy not
