"""`autotune trial --check-parity`: the configuration beside a one-rank run of the same global batch and seed, and
how far their per-step losses are apart (autotune.trial_runner's parity plans and comparison)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from autotune.cli._trial_view import trial_progress
from autotune.search_space import TrialConfig
from autotune.trial_runner import Launcher, Outcome, compare_losses, parity_plans, plan_for, run_trial


def check_parity(console: Console, err_console: Console, spec: Any, config: TrialConfig, folder: Path,
                 launcher: Launcher, as_json: bool) -> int:
    """Run both, print ``parity: max relative loss difference X over N steps``; the exit status (1: a run did not
    complete, or the difference is past the tolerance of the configuration's precision)."""
    mine, one = parity_plans(plan_for(spec, config, evaluate=False))
    results = []
    for name, plan in (("configuration", mine), ("one-rank", one)):
        with trial_progress(err_console, plan.limits, enabled=not as_json) as on_tick:
            result = run_trial(plan, folder / name, launcher, max_memory_mb=spec.constraints.max_memory_mb,
                               on_tick=on_tick)
        if result.outcome is not Outcome.COMPLETE:
            err_console.print(f"parity: the {name} run ended {result.outcome.value}: {result.reason} "
                              f"(its folder: {folder / name})", highlight=False, markup=False)
            return 1
        results.append(result)
    parity = compare_losses(results[0].windows, results[1].windows, config.amp)
    if as_json:
        click.echo(json.dumps({
            "parity": {"max_relative_difference": parity.max_relative_difference, "steps": parity.steps,
                       "tolerance": parity.tolerance, "ok": parity.ok},
            "trial_dir": str(folder), "config": mine.config.model_dump(), "one_rank_config": one.config.model_dump(),
            "losses": [w.loss for w in results[0].windows], "one_rank_losses": [w.loss for w in results[1].windows],
        }, indent=2))
    else:
        verdict = "within" if parity.ok else "PAST"
        console.print(f"{parity.line()} ({verdict} the tolerance {parity.tolerance:g} for amp {config.amp}; one rank "
                      f"at batch_size {one.config.batch_size} x grad_accum {one.config.grad_accum})", highlight=False,
                      soft_wrap=True)
    return 0 if parity.ok else 1
