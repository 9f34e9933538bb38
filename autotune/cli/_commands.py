"""The ``autotune`` command line: parse once, call the library, print with rich.

Every command catches :class:`~autotune.errors.AutotuneError` and prints it as one line: exit 2 for bad
input, 1 for a failed run. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click
from rich.console import Console

from autotune.cli._errors import Group, debugging, handle_errors
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.search_space import SearchSpace, TrialConfig

console = Console()
err_console = Console(stderr=True)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="autotune")
def main(debug: bool) -> None:
    """Calibrate distributed PyTorch training before it runs.

    \b
    Exit status, for every command:
      0    success
      1    nothing usable: `run` with no completed (or no feasible) trial, or stopped early because every
           trial failed with the same workload error; `trial` with an outcome other than complete or
           pruned; an internal error
      2    bad input (study file, --set, workload), refused before anything runs
      130  interrupted by Ctrl-C; 143 by SIGTERM
    """


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a study-file key.")
@click.option("--no-build", is_flag=True, help="Import the workload only: do not build it or run its loss.")
@handle_errors
def validate(study_file: str, sets: tuple[str, ...], no_build: bool) -> None:
    """Check a study file and its workload; print the resolved study.

    The workload is built once in this process (CPU, no ranks) and its loss run on one batch of two
    samples, so a mistake in it is one error line now (exit 2) rather than a crash in every trial.
    --no-build skips that for a workload too heavy to build here. Warnings name knobs the objectives
    cannot decide and choices that will hurt on this machine.
    """
    from autotune.cli._validate import render_resolved_study
    from autotune.workload_check import captured_output, check_workload, load_spec, study_warnings

    # What the workload prints while it is built is held back: a refusal is then one line (the held lines
    # come before it with --debug); when the workload passes, they are shown on stderr as printed.
    printed: list[str] = []
    try:
        with captured_output() as printed:
            spec = load_spec(study_file, overrides=sets)
            report = None if no_build else check_workload(spec)
    except AutotuneError:
        if printed and debugging():
            click.echo("\n".join(printed), err=True)
        raise
    except BaseException:  # not foreseen: what was printed may explain it
        if printed:
            click.echo("\n".join(printed), err=True)
        raise
    if printed:
        click.echo("\n".join(printed), err=True)
    render_resolved_study(spec, console)
    if report is not None:
        console.print(f"[green]ok[/] {report.line()}", highlight=False, soft_wrap=True)
    for warning in study_warnings(spec, spec.resolved_device()):
        console.print(f"[yellow]warning[/] {warning}", highlight=False)


@main.command()
def schema() -> None:
    """Print the JSON schema of study files (for editors)."""
    from autotune.spec import StudySpec

    click.echo(json.dumps(StudySpec.model_json_schema(), indent=2))


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set a knob (batch_size=64) or override a study-file key (workload.args.n_layer=4).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (outcome, reason, metrics, config).")
@click.option("--dir", "trial_dir", type=click.Path(file_okay=False), help="Trial folder (default: runs/NAME/).")
@click.option("--check-parity", is_flag=True, help="Run it beside one rank at the same global batch and seed, 20 "
              "steps each, and compare the losses (exit 1 past the tolerance: 1e-4 relative in fp32).")
@handle_errors
def trial(study_file: str, sets: tuple[str, ...], as_json: bool, trial_dir: str | None, check_parity: bool) -> None:
    """Run exactly one trial with the given knobs, outside any study, and print how it went.

    Knobs fixed in the study's search space are used, others take their defaults; the study's trial
    limits and memory budget apply. A --set whose key is a knob sets it; a dotted key or another
    top-level study-file key overrides the study file, as in `validate` and `run`.

    Exit status: 0 when the trial completed or was pruned, 1 for any other outcome (oom, diverged,
    crashed, timeout, hang), 2 for bad input.
    """
    from pathlib import Path

    from autotune.cli._trial_view import print_trial_result, trial_progress
    from autotune.search_space import study_space
    from autotune.trial_runner import Outcome, make_launcher, plan_for, run_trial
    from autotune.workload_check import load_spec, native_bf16

    knob_sets, study_sets = _split_sets(sets)
    spec = load_spec(study_file, overrides=study_sets)
    space = study_space(spec)
    config = _config_of_sets(space, knob_sets)
    folder = Path(trial_dir) if trial_dir else spec.runs_dir() / f"trial-{_stamp()}"
    if config.amp == "bf16" and config.device == "cpu" and native_bf16() is False:
        err_console.print("[yellow]warning[/] amp=bf16 on this CPU has no native bf16 (no AVX512_BF16/AMX flags): "
                          "it is emulated and usually several times slower than fp32", highlight=False)
    launcher = make_launcher(spec)
    if check_parity:
        from autotune.cli._parity import check_parity as run_parity

        try:
            sys.exit(run_parity(console, err_console, spec, config, folder, launcher, as_json))
        finally:
            launcher.close()
    try:
        with trial_progress(err_console, spec.trial, enabled=not as_json) as on_tick:
            result = run_trial(
                plan_for(spec, config, evaluate=spec.evaluates(searching=False)), folder, launcher,
                max_memory_mb=spec.constraints.max_memory_mb, on_tick=on_tick,
            )
    finally:
        launcher.close()
    if as_json:
        payload = result.to_json()
        payload.pop("windows")
        payload["config"] = config.model_dump()
        click.echo(json.dumps(payload, indent=2))
    else:
        print_trial_result(console, config, result, debug=debugging())
    if result.outcome not in (Outcome.COMPLETE, Outcome.PRUNED):
        sys.exit(1)



def _config_of_sets(space: SearchSpace, knob_sets: list[str]) -> TrialConfig:
    """The trial's config from `trial --set` knob values; values that cannot go together (static_graph with
    grad_accum above 1) are bad input, one line."""
    from pydantic import ValidationError

    from autotune.errors import UsageError

    try:
        return space.config(space.parse_sets(knob_sets))
    except ValidationError as e:
        reasons = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
        raise UsageError(f"--set: {reasons}") from None
    except ValueError as e:
        raise UsageError(f"--set: {e}") from None


def _split_sets(sets: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """`trial --set`: knob=value items (and env.NAME=value), and study-file overrides (another dotted key, or a
    top-level study-file key)."""
    from autotune.knobs import KNOBS
    from autotune.spec import StudySpec

    knobs, study = [], []
    for item in sets:
        key = item.partition("=")[0].strip()
        if key.startswith("env."):  # one trial's environment variable (the search space parses it)
            knobs.append(item)
        elif key not in KNOBS and ("." in key or key in StudySpec.model_fields):
            study.append(item)
        else:
            knobs.append(item)
    return knobs, study


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--n-trials", type=click.IntRange(min=1), help="Trials the study should hold (baseline included).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), help="Stop searching after S s.")
@click.option("--storage", help="Storage URL (overrides the study file).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a study-file key.")
@handle_errors
def run(study_file: str, n_trials: int | None, timeout_s: float | None, storage: str | None,
        sets: tuple[str, ...]) -> None:
    """Run (or resume) a study: baseline, search, confirmation, then the chosen configuration.

    Running the same command again continues the study where it stopped.

    Exit status: 0 with a chosen configuration; 1 when no trial completed or none is feasible, or when
    the study stopped early because its workload is broken (the same error in the baseline and the
    next trials); 2 for bad input; 130/143 when interrupted (rerun to continue).
    """
    from autotune.spec import read_spec
    from autotune.trial_runner import prepared_launcher  # without torch: the zygote starts before it is imported

    spec = read_spec(study_file, _storage_override(storage, sets))
    # The launcher's zygote imports torch while this process imports its own (the tuner, 1.2 s) and imports and
    # checks the workload (load_spec's check).
    launcher = prepared_launcher(spec)
    try:
        from autotune.cli._run_summary import print_summary
        from autotune.cli._run_view import RunView
        from autotune.tuner import Interrupted, Tuner
        from autotune.workload_check import check_workload_fits

        check_workload_fits(spec)
        view = RunView(console, spec.name, spec.trial.max_steps)
        try:
            summary = Tuner(spec, observer=view, launcher=launcher).run(n_trials=n_trials, timeout_s=timeout_s)
        except Interrupted as stop:
            view.stop()
            what = "the running trial was stopped and recorded" if stop.trial_stopped else "no trial was running"
            if stop.trial_stopped and not stop.recorded:
                what = ("the running trial was stopped, but could not be recorded (the storage is unreachable): the "
                        "next run records it as interrupted and runs it again")
            err_console.print(f"interrupted: {what}; rerun `autotune run {study_file}` to continue")
            sys.exit(stop.exit_code)
        finally:
            view.stop()
    finally:
        launcher.close()
    print_summary(console, summary, spec)
    if summary.best_config is None:
        sys.exit(1)


def _storage_override(storage: str | None, sets: tuple[str, ...]) -> list[str]:
    return [*sets, f"storage={storage}"] if storage else list(sets)


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="yaml to read, json for scripts.")
@click.option("--storage", help="Storage URL (overrides the study file).")
@handle_errors
def best(study_file: str, fmt: str, storage: str | None) -> None:
    """Print the best configuration found so far (knobs and derived values)."""
    from autotune.cli._results import best_payload

    payload = best_payload(study_file, storage)
    if fmt == "json":
        click.echo(json.dumps(payload, indent=2))
    else:
        import yaml

        click.echo(yaml.safe_dump(payload, sort_keys=False).rstrip())


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--storage", help="Storage URL (overrides the study file).")
@handle_errors
def status(study_file: str, storage: str | None) -> None:
    """Summarise a study, finished or in progress: counts by outcome, running trials, best so far."""
    from autotune.cli._results import print_status

    print_status(console, study_file, storage)


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Nodes of the run to plan.")
@click.option("--ranks-per-node", type=click.IntRange(min=1), required=True, help="Ranks (GPUs) on each node.")
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True, help="Configurations to show.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--storage", help="Storage URL (overrides the study file).")
@click.option("--sync-growth", metavar="STEP,PER_DOUBLING",
              help="The cluster's network profile: the sync across N > 2 nodes is STEP + PER_DOUBLING x log2(N/2) "
                   "times the 2-node sync (from other jobs on the cluster, or an all-reduce benchmark).")
@handle_errors
def plan(study_file: str, nodes: int, ranks_per_node: int, top: int, as_json: bool, storage: str | None,
         sync_growth: str | None) -> None:
    """Predict the study's best configurations at NODES x RANKS_PER_NODE, a scale it may never have run.

    A throughput model (compute by per-rank batch, gradient sync by ranks and nodes, their overlap) is
    fitted to the study's completed trials; the table gives the predicted samples/s with a 90% interval,
    the per-rank batch and grad_accum to use (among those measured), and how far past the measured scales
    the prediction reaches. Exit status 2 when the trials have too few distinct scales to fit (it names
    what is needed).
    """
    from autotune.cli._plan import load_plan, plan_payload, print_plan

    name, scale = load_plan(study_file, nodes, ranks_per_node, storage, top, sync_growth)
    if as_json:
        click.echo(json.dumps(plan_payload(name, scale), indent=2))
    else:
        print_plan(console, name, scale)


def _stamp() -> str:
    import datetime

    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the HTML file.")
@click.option("--png", "png_dir", type=click.Path(file_okay=False), help="Also write each figure as PNG here.")
@click.option("--storage", help="Storage URL (overrides the study file).")
@handle_errors
def report(study_file: str, output: str | None, png_dir: str | None, storage: str | None) -> None:
    """Write the study's offline HTML report: one self-contained file (plotly.js inlined).

    The default path is STUDY_FILE's folder/../dashboards/NAME.html when that dashboards folder exists
    (studies/x.yaml -> dashboards/NAME.html), else ./dashboards/NAME.html. The study must be in its
    storage (run `autotune run STUDY_FILE` first); the workload is not imported.
    """
    from autotune.report import write_report
    from autotune.workload_check import load_spec

    spec = load_spec(study_file, _storage_override(storage, ()), check_workload=False)
    path = write_report(spec, path=output, png_dir=png_dir)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    if png_dir:
        click.echo(f"wrote the figures as PNG to {png_dir}/")


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0: a free port.")
@click.option("--storage", help="Storage URL (overrides the study file).")
@handle_errors
def dashboard(study_file: str, host: str, port: int, storage: str | None) -> None:
    """Serve optuna-dashboard on the study's storage (trial logs as artifacts) until Ctrl-C."""
    from autotune.report import is_loopback, serve_dashboard
    from autotune.workload_check import load_spec

    spec = load_spec(study_file, _storage_override(storage, ()), check_workload=False)
    if not is_loopback(host):
        click.echo(f"warning: listening on {host}: the dashboard has no authentication; anyone who can reach "
                   "this address can read and change the study", err=True)
    serve_dashboard(spec, host=host, port=port,
                    announce=lambda url: click.echo(f"optuna-dashboard for {spec.name}: {url} (Ctrl-C stops it)"))

