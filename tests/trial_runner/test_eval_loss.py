"""The held-out loss at a trial's end: every rank's share of eval_dataset, averaged over all samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import TrialPlan, WarmLauncher, run_trial

HERE = Path(__file__).parent


def _run(  # type: ignore[no-untyped-def]
    tmp_path: Path, launcher: WarmLauncher, world_size: int, eval_samples: int, batch: int = 4, evaluate: bool = True
):
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=4, batch_size=batch, world_size=world_size)
    plan = TrialPlan(
        config=config, entrypoint="eval_workload.py:build", args={"eval_samples": eval_samples}, base_dir=str(HERE),
        limits=TrialLimits(warmup_steps=1, max_steps=6, max_seconds=40, hang_seconds=10), evaluate=evaluate,
    )
    return run_trial(plan, tmp_path / f"w{world_size}-{eval_samples}", launcher)


@pytest.mark.parametrize("world_size", [1, 2])
def test_eval_loss_is_the_mean_over_every_ranks_share(
    tmp_path: Path, warm_launcher: WarmLauncher, world_size: int
) -> None:
    result = _run(tmp_path, warm_launcher, world_size, eval_samples=10, batch=3)
    assert result.outcome.value == "complete", result.reason
    # values 0..9 split over the ranks, in batches of 3 (the last one short): their mean, exactly
    assert result.eval_loss == pytest.approx(4.5)
    assert result.metrics()["eval_loss"] == result.eval_loss


def test_no_eval_dataset_no_eval_loss(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, 1, eval_samples=0)
    assert result.outcome.value == "complete" and result.eval_loss is None


def test_a_plan_without_evaluation_records_no_eval_loss(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, 1, eval_samples=10, batch=3, evaluate=False)
    assert result.outcome.value == "complete", result.reason
    assert result.eval_loss is None


# trial.evaluate: which trials of a study evaluate (the study's objectives and hyperparameters decide `auto`)
_BASE = {"name": "ev", "workload": {"entrypoint": "autotune.workloads.mlp:build"}}


@pytest.mark.parametrize(
    ("extra", "search", "own_sake"),
    [
        ({}, False, True),  # speed alone: the confirmation runs and `autotune trial` only
        ({"objectives": [{"metric": "throughput"}, {"metric": "peak_memory_mb"}]}, False, True),
        ({"objectives": [{"metric": "eval_loss"}]}, True, True),
        ({"objectives": [{"metric": "throughput"}, {"metric": "loss"}]}, True, True),
        ({"objectives": [{"metric": "time_to_loss", "target": 0.5}]}, True, True),
        ({"hyperparameters": {"hidden": {"choices": [32, 64]}}}, True, True),
        ({"hyperparameters": {"hidden": 64}}, False, True),  # fixed: nothing about quality is searched
        ({"trial": {"evaluate": "always"}}, True, True),
        ({"trial": {"evaluate": "never"}, "objectives": [{"metric": "loss"}]}, False, False),
    ],
)
def test_which_trials_evaluate(extra: dict[str, object], search: bool, own_sake: bool) -> None:
    from autotune.spec import StudySpec

    spec = StudySpec.model_validate({**_BASE, **extra})
    assert spec.evaluates(searching=True) is search
    assert spec.evaluates(searching=False) is own_sake


def test_a_speed_study_evaluates_in_its_confirmation_runs_only(tmp_path: Path) -> None:
    # The study-file defaults (trial.evaluate: auto) on a speed objective: the search's trials end without
    # evaluating, the confirmation runs of the chosen configuration and the baseline evaluate, and the
    # summary's held-out row reads them.
    from rich.console import Console

    import autotune
    from autotune.cli._run_summary import print_summary
    from autotune.tuner import summarize

    study = tmp_path / "study.yaml"
    study.write_text(
        "name: ev\n"
        "workload: {entrypoint: 'autotune.workloads.mlp:build', args: {hidden: 32, depth: 1, samples: 640, "
        "transform_cost: 0}}\n"
        "search_space: {batch_size: {choices: [16, 32]}}\n"
        "trial: {warmup_steps: 1, max_steps: 8, max_seconds: 40, report_every: 2}\n"
        "sampler: {name: random, seed: 0}\npruner: {name: none}\nbudget: {n_trials: 2}\n"
        "confirm: {top_k: 1, repeats: 1, max_repeats: 1}\n"
    )
    calibration = autotune.calibrate(study)
    trials = calibration.study.get_trials()
    searched = [t for t in trials if t.user_attrs["role"] != "confirm"]
    confirms = [t for t in trials if t.user_attrs["role"] == "confirm"]
    assert searched and all(t.user_attrs.get("eval_loss") is None for t in searched)
    assert confirms and all(isinstance(t.user_attrs["eval_loss"], float) for t in confirms
                            if t.user_attrs["outcome"] == "complete")
    spec = autotune.load_spec(study)
    console = Console(record=True, width=160)
    print_summary(console, summarize(calibration.study, spec), spec)
    assert "held-out loss (eval_dataset)" in console.export_text()
