"""The batch and the scale on a real GPU cluster's measurements: the Pollux traces (OSDI 2021).

Six jobs (bert, cifar10, deepspeech2, imagenet, ncf, yolov3) measured on up to 16 nodes x 4 GPUs
(/work/shared/data/pollux-traces, its README says what each file holds; ``--traces`` points elsewhere).
Three questions, each against the traces' own measurements:

(a) **Prediction over scale.** ``autotune.scale.ScaleModel`` fitted on every row of ``placements.csv`` and
    ``scalability.csv`` with at most 2 nodes predicts every row with 4 or more: the median and 90th percentile
    of the relative throughput error per job, and how often the measured value falls in the 90% interval.
    Beside it the same fit with the cluster's network profile (``autotune.scale.fit_sync_growth``: how the
    sync across nodes grows past 2 nodes, as a ratio to the 2-node sync), learned leave-one-job-out from the
    other five jobs' rows at every node count, as a service that has seen other jobs on the cluster knows it;
    its growth per doubling weighed toward the jobs whose sync adds about as many seconds at 2 nodes
    (``SyncGrowth.near``), and, as a check on how much rests on that, at other widths of the weights.
(b) **The per-GPU batch `plan` recommends.** Two studies per job are replayed through the real tuner
    (``Tuner(run_trial=replay_runner(...))``: its storage, sampler and telling; a trial's throughput is the
    trace's row for the trial's placement and per-GPU batch): one node (world_size 1-4) and two nodes
    (``launcher: {kind: slurm, nodes: 2}``, world_size 2, 4, 6, 8), every measured per-GPU batch, grid
    sampler. Their stored trials are the readings (``autotune.objectives.study_readings``); the plan at 4, 8
    and 16 nodes x 4 GPUs picks a per-GPU batch among those the placement measured; its measured throughput
    there over the best measured throughput at that placement is the score (target >= 95%).
(c) **Goodput.** Per job a target validation metric that every traced global batch reaches (the worst
    batch's best metric); the gradient noise scale (``B_noise = B0 * grad_var / grad_sqr``, B0 the smallest
    traced batch, whose scale the traces' variance is recorded at) read over the first 10% of steps of each
    validation trace and projected to the run's end (``autotune.scale.project_noise_scale``: a power law in
    Pollux's progress, fitted to those readings, at the trace's final progress, the run's planned length; the
    median over the traces); at each scale the global batch that maximises the plan's predicted throughput
    times the statistical efficiency ``(B_noise + B0) / (B_noise + B)``, against the traced batch reaching the
    target soonest there (steps to the target from the validation trace, times the placement's measured step
    time; a per-GPU batch beyond the largest measured accumulates, as Pollux does). Target: within 10% of the
    fastest's time. Beside it, the choice from the noise scale read at 10% of the steps (no projection).

    python benchmarks/pollux_traces.py                      # 2.3 minutes at load 4-6; 24 at load 16
    python benchmarks/pollux_traces.py --parts a c          # no replayed study: seconds (pollux_traces_ac.json)
    python benchmarks/pollux_traces.py --quick              # 2 jobs, 20 bootstrap refits: 4 minutes
"""

from __future__ import annotations

import argparse
import csv
import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from _common import MLP, check, console, default_out, machine_facts, make_spec, print_table, quiet_optuna, write_json

from autotune.scale import (
    ScaleModel,
    StepReading,
    SyncGrowth,
    efficiency,
    fit_sync_growth,
    plan_scale,
    project_noise_scale,
)

TRACES = Path("/work/shared/data/pollux-traces")
JOBS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
SCALES = (4, 8, 16)  # nodes, each with 4 GPUs
GPUS = 4
TARGET_MEDIAN, TARGET_P90 = 0.10, 0.25  # (a)
TARGET_BATCH = 0.95  # (b): of the best measured throughput at the placement
TARGET_TIME = 0.10  # (c): within 10% of the fastest traced batch's time
TARGET_JOBS = 5  # (b), (c): on at least 5 of the 6 jobs
EARLY = 0.10  # (c): the first 10% of steps
WIDTHS = (0.5, 2.0, 1e6)  # (a): the profile's weights at other widths than its own 1 (1e6: every member alike)


@dataclass
class Row:
    nodes: int
    ranks: int
    placement: str  # digits per node, the smallest rotation; "" for scalability.csv rows
    batch: int
    step_s: float
    sync_s: float

    @property
    def throughput(self) -> float:
        return self.ranks * self.batch / self.step_s

    def reading(self) -> StepReading:
        return StepReading(self.nodes, self.ranks, self.batch, 1, self.step_s)


@dataclass
class Job:
    name: str
    rows: list[Row]
    validation: dict[int, list[dict[str, float]]] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> Job:
        rows = []
        for r in csv.DictReader((folder / "placements.csv").open()):
            p = r["placement"]
            rows.append(
                Row(len(p), sum(map(int, p)), p, int(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
            )
        for r in csv.DictReader((folder / "scalability.csv").open()):
            rows.append(
                Row(
                    int(r["num_nodes"]),
                    int(r["num_replicas"]),
                    "",
                    int(r["local_bsz"]),
                    float(r["step_time"]),
                    float(r["sync_time"]),
                )
            )
        validation = {}
        for path in folder.glob("validation-*.csv"):
            batch = int(path.stem.split("-")[1])
            validation[batch] = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(path.open())]
        return cls(folder.name, rows, dict(sorted(validation.items())))

    def at(self, nodes: int, ranks: int) -> dict[int, Row]:
        """The measured rows of the placement ``ranks`` evenly over ``nodes`` (per-GPU batch -> row)."""
        want = balanced(nodes, ranks)
        out: dict[int, Row] = {}
        for r in self.rows:
            if r.nodes == nodes and r.ranks == ranks and (r.placement in ("", want)):
                out.setdefault(r.batch, r)
        return out


def balanced(nodes: int, ranks: int) -> str:
    """The placement string of ``ranks`` spread evenly over ``nodes``, as the traces write it (the
    lexicographically smallest rotation)."""
    base, extra = divmod(ranks, nodes)
    digits = [base + (1 if i < extra else 0) for i in range(nodes)]
    rotations = ["".join(map(str, digits[i:] + digits[:i])) for i in range(nodes)]
    return min(rotations)


# ------------------------------------------------------------------------------------------------ (a)
def crude_errors(job: Job) -> list[float]:
    """The issue's reference: compute time linear in the per-GPU batch from the one-GPU rows, plus the median
    sync time of the two-node rows (it reads the traces' sync column, which a study does not measure)."""
    one = [r for r in job.rows if r.ranks == 1]
    beta, alpha = np.polyfit([r.batch for r in one], [r.step_s for r in one], 1)
    sync = float(np.median([r.sync_s for r in job.rows if r.nodes == 2]))
    return [
        abs(r.ranks * r.batch / (alpha + beta * r.batch + sync) / r.throughput - 1) for r in job.rows if r.nodes >= 4
    ]


def network_profile(job: Job, others: list[Job]) -> SyncGrowth:
    """The cluster's network profile learned from the other jobs' rows at every node count (leave-one-job-out:
    none of ``job``'s own rows)."""
    return fit_sync_growth([[r.reading() for r in o.rows] for o in others if o.name != job.name])


def scored(model: ScaleModel, test: list[Row]) -> dict[str, Any]:
    """The model's median and 90th-percentile relative throughput error over ``test``, and its interval's
    coverage."""
    errors, inside = [], 0
    for r in test:
        speed = model.throughput(r.nodes, r.ranks, r.batch)
        errors.append(abs(speed.value / r.throughput - 1))
        inside += speed.low <= r.throughput <= speed.high
    median, p90 = float(np.median(errors)), float(np.percentile(errors, 90))
    met = median <= TARGET_MEDIAN and p90 <= TARGET_P90
    return {"median_error": median, "p90_error": p90, "interval_coverage": inside / len(test), "met": met}


def prediction(job: Job, bootstrap: int, profile: SyncGrowth | None = None) -> tuple[dict[str, Any], ScaleModel]:
    """(a) for one job: its own <= 2-node fit alone, and (with ``profile``) the same fit with the network
    profile; the model returned is the one without the profile."""
    train = [r.reading() for r in job.rows if r.nodes <= 2]
    test = [r for r in job.rows if r.nodes >= 4]
    model = ScaleModel.fit(train, bootstrap=bootstrap)
    crude = crude_errors(job)
    out = {
        "crude_median_error": float(np.median(crude)),
        "crude_p90_error": float(np.percentile(crude, 90)),
        "train_rows": len(train),
        "test_rows": len(test),
        **scored(model, test),
        "params": vars(model.params),
        "assumptions": model.assumptions(),
    }
    if profile is not None:
        with_profile = ScaleModel.fit(train, bootstrap=bootstrap, growth=profile)
        used = with_profile.growth or profile  # weighed toward the members nearest this job's own sync
        out["profile"] = {
            "step": used.step,
            "per_doubling": used.per_doubling,
            "per_doubling_unweighed": profile.per_doubling,
            "sync_s": used.sync_s,
            "factor": {n: float(used.factor(n)) for n in SCALES},
            "members": [list(m) for m in profile.members],
            "member_sync_s": list(profile.member_sync_s),
        }
        out |= {f"profile_{k}": v for k, v in scored(with_profile, test).items()}
        out["profile_params"] = vars(with_profile.params)
        out["profile_width"] = {  # how much the result rests on the weights' width (point fits)
            str(width): scored(ScaleModel.fit(train, bootstrap=0, growth=replace(profile, width=width)), test)
            for width in WIDTHS
        }
    return out, model


# ------------------------------------------------------------------------------------------------ (b)
def replayed_readings(job: Job, nodes: int, folder: Path) -> list[StepReading]:
    """A study on ``nodes`` node(s) over every measured per-GPU batch and world sizes 1-4 per node, replayed
    through the real tuner; its stored trials read back as the scale model's readings."""
    from _common import study_document

    from autotune.objectives import study_readings
    from autotune.search_space import TrialConfig
    from autotune.trial_runner import Outcome
    from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner

    sizes = [nodes * k for k in range(1, GPUS + 1)]
    batches = sorted({r.batch for r in job.rows if r.nodes == nodes})
    measured = {ws: job.at(nodes, ws) for ws in sizes}

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        row = measured[config.world_size].get(config.batch_size)
        if row is None:  # a placement the trace did not measure at this batch: a failed trial is data
            return Measured(0.0, outcome=Outcome.CRASHED)
        return Measured(row.throughput)

    space = {"batch_size": {"choices": batches}, "world_size": {"choices": sizes}}
    trial = {"warmup_steps": 1, "max_steps": 4, "report_every": 1}
    grid = len(batches) * len(sizes)
    document = study_document(
        f"pollux-{job.name}-{nodes}n",
        MLP,
        space,
        trial,
        sampler={"name": "grid", "seed": 0},
        pruner={"name": "none"},
        n_trials=grid,
        confirm={"top_k": 0},
        storage=f"sqlite:///{folder}/{job.name}-{nodes}.db",
    )
    document["baseline"] = {"batch_size": batches[0], "world_size": sizes[0]}
    if nodes > 1:
        document["launcher"] = {"kind": "slurm", "nodes": nodes}
    spec = make_spec(document, folder)
    study = Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=grid).study
    return study_readings(study, nodes)


def recommended(job: Job, model: ScaleModel) -> list[dict[str, Any]]:
    """At each scale: the plan's per-GPU batch among those the placement measured, against the best there."""
    out = []
    for nodes in SCALES:
        rows = job.at(nodes, nodes * GPUS)
        plans = plan_scale(model, nodes, GPUS, sorted(rows))
        pick = plans[0]
        best = max(rows.values(), key=lambda r: r.throughput)
        got = rows[pick.batch_size].throughput
        out.append(
            {
                "nodes": nodes,
                "gpus": nodes * GPUS,
                "batch": pick.batch_size,
                "predicted": pick.throughput.value,
                "measured": got,
                "best_batch": best.batch,
                "best": best.throughput,
                "of_best": got / best.throughput,
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ (c)
def increasing(job: Job) -> bool:
    first = next(iter(job.validation.values()))
    return first[-1]["metric"] > first[0]["metric"]


def target_metric(job: Job) -> float:
    """The worst traced batch's best metric: every traced batch reaches it."""
    best = [
        max(r["metric"] for r in rows) if increasing(job) else min(r["metric"] for r in rows)
        for rows in job.validation.values()
    ]
    return min(best) if increasing(job) else max(best)


def steps_to(job: Job, batch: int, target: float) -> float:
    """Optimizer steps until the batch's validation trace reaches ``target`` (linear between its rows)."""
    up = increasing(job)
    previous: tuple[float, float | None] = (0.0, None)
    for r in job.validation[batch]:
        reached = r["metric"] >= target if up else r["metric"] <= target
        if reached:
            it0, m0 = previous
            if m0 is None or m0 == r["metric"]:
                return r["iteration"]
            share = (target - m0) / (r["metric"] - m0)
            return it0 + min(max(share, 0.0), 1.0) * (r["iteration"] - it0)
        previous = (r["iteration"], r["metric"])
    return math.inf


def early_rows(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """A validation trace's rows within its first 10% of steps with a positive gradient norm (at least the
    first such row): what a run has read of its noise scale by then."""
    last = rows[-1]["iteration"]
    usable = [r for r in rows if r["grad_sqr"] > 0 and r["grad_var"] > 0]
    return [r for r in usable if r["iteration"] <= EARLY * last] or usable[:1]


def early_noise_scale(job: Job, at_end: bool = True) -> float:
    """B_noise from the first 10% of steps of every validation trace, median over the traces: the estimate at
    10% of the steps (the trace's last row within them: what a running estimate reads then), or with
    ``at_end=False`` the ratio of the sums over all of those rows (the early rows' noise scale is smaller)."""
    base = min(job.validation)
    values = []
    for rows in job.validation.values():
        early = early_rows(rows)
        if at_end:
            early = early[-1:]
        values.append(base * sum(r["grad_var"] for r in early) / sum(r["grad_sqr"] for r in early))
    return float(np.median(values))


def projected_noise_scale(job: Job) -> float:
    """B_noise projected to the run's end (``project_noise_scale``: a power law in progress fitted to the rows
    of the first 10% of steps, at the trace's final progress, the run's planned length), median over traces."""
    base = min(job.validation)
    values = []
    for rows in job.validation.values():
        early = early_rows(rows)
        noise = [base * r["grad_var"] / r["grad_sqr"] for r in early]
        values.append(project_noise_scale([r["progress"] for r in early], noise, rows[-1]["progress"]))
    return float(np.median(values))


def step_time(rows: dict[int, Row], per_gpu: float) -> float | None:
    """The placement's measured step time at a per-GPU batch: interpolated (log batch) between measured
    batches; past the largest, accumulated (the compute of the extra micro-batches, without their sync)."""
    batches = sorted(rows)
    if per_gpu < batches[0]:
        return None
    accum = max(1, math.ceil(per_gpu / batches[-1] - 1e-9))
    micro = per_gpu / accum
    logs = [math.log(b) for b in batches]
    step = float(np.interp(math.log(micro), logs, [rows[b].step_s for b in batches]))
    sync = float(np.interp(math.log(micro), logs, [rows[b].sync_s for b in batches]))
    return step + (accum - 1) * (step - sync)


def traced_times(job: Job, nodes: int, target: float) -> dict[int, float]:
    """Seconds to the target at ``nodes x 4`` GPUs of every traced global batch the placement can run."""
    gpus = nodes * GPUS
    rows = job.at(nodes, gpus)
    times = {}
    for batch in job.validation:
        step = step_time(rows, batch / gpus)
        if step is not None:
            times[batch] = steps_to(job, batch, target) * step
    return times


def goodput_pick(job: Job, model: ScaleModel, nodes: int, batches: list[int], noise: float) -> int:
    """The traced global batch of the highest predicted goodput at ``nodes x 4`` GPUs."""
    gpus, base = nodes * GPUS, min(job.validation)
    largest = max(job.at(nodes, gpus))

    def goodput(batch: int) -> float:
        accum = max(1, math.ceil(batch / gpus / largest - 1e-9))
        micro = max(1, round(batch / gpus / accum))
        return model.throughput(nodes, gpus, micro, accum).value * efficiency(batch, noise, base)

    return max(batches, key=goodput)


NOISE_READINGS = ("projected", "at_window_end", "window_mean")  # the first is the choice the target judges


def goodput_choice(job: Job, model: ScaleModel) -> dict[str, Any]:
    """At each scale the goodput choice with the projected noise scale (judged), and beside it the choices with
    the noise scale read at 10% of the steps and as the mean over the first 10% (before the projection)."""
    target = target_metric(job)
    noises = {
        "projected": projected_noise_scale(job),
        "at_window_end": early_noise_scale(job),
        "window_mean": early_noise_scale(job, at_end=False),
    }
    per_scale: list[dict[str, Any]] = []
    for nodes in SCALES:
        times = traced_times(job, nodes, target)
        if not times:
            continue
        fastest = min(times, key=lambda b: times[b])
        scale: dict[str, Any] = {
            "nodes": nodes,
            "gpus": nodes * GPUS,
            "feasible": sorted(times),
            "times_s": times,
            "fastest": fastest,
            "fastest_time_s": times[fastest],
        }
        for name, noise in noises.items():
            choice = goodput_pick(job, model, nodes, sorted(times), noise)
            suffix = "" if name == "projected" else f"_{name}"
            scale[f"choice{suffix}"] = choice
            scale[f"choice_time_s{suffix}"] = times[choice]
            scale[f"over_fastest{suffix}"] = times[choice] / times[fastest] - 1
        per_scale.append(scale)
    met = {
        name: bool(per_scale)
        and all(s["over_fastest" + ("" if name == "projected" else f"_{name}")] <= TARGET_TIME for s in per_scale)
        for name in noises
    }
    return {
        "target_metric": target,
        "metric_increases": increasing(job),
        "noise_scale": noises["projected"],
        "noise_scale_at_window_end": noises["at_window_end"],
        "noise_scale_window_mean": noises["window_mean"],
        "base_batch": min(job.validation),
        "scales": per_scale,
        "met": met["projected"],
        "met_at_window_end": met["at_window_end"],
        "met_by_window_mean": met["window_mean"],
    }


# ------------------------------------------------------------------------------------------------ main
PARTS = ("a", "b", "c")


def run_job(
    job: Job, bootstrap: int, folder: Path, parts: tuple[str, ...], profile: SyncGrowth | None = None
) -> dict[str, Any]:
    """The parts asked of one job; (c) uses (a)'s model (without the network profile), which is fitted
    whenever (a) or (c) runs."""
    out: dict[str, Any] = {}
    if "a" in parts or "c" in parts:
        a, model = prediction(job, bootstrap if "a" in parts else 0, profile if "a" in parts else None)
        if "a" in parts:
            out["prediction"] = a
        if "c" in parts:
            out["goodput"] = goodput_choice(job, model)
    if "b" in parts:
        readings = replayed_readings(job, 1, folder) + replayed_readings(job, 2, folder)
        b = recommended(job, ScaleModel.fit(readings, bootstrap=0))
        out |= {"replayed_readings": len(readings), "plan": b, "plan_met": all(s["of_best"] >= TARGET_BATCH for s in b)}
    return out


def report_a(results: dict[str, dict[str, Any]]) -> None:
    print_table(
        "(a) fitted on <= 2 nodes, predicting every row on 4-16 nodes (relative throughput error); with the "
        "network profile from the other five jobs (leave-one-job-out)",
        [
            "job",
            "train rows",
            "test rows",
            "median",
            "p90",
            "in 90% interval",
            "crude: median / p90",
            "target",
            "profile x at 4/8/16 nodes",
            "with profile: median / p90",
            "in interval",
            "target",
        ],
        [
            [
                j,
                a["train_rows"],
                a["test_rows"],
                f"{a['median_error']:.1%}",
                f"{a['p90_error']:.1%}",
                f"{a['interval_coverage']:.0%}",
                f"{a['crude_median_error']:.1%} / {a['crude_p90_error']:.1%}",
                check(a["met"]),
                *profile_cells(a),
            ]
            for j, a in ((j, r["prediction"]) for j, r in results.items())
        ],
    )


def profile_cells(a: dict[str, Any]) -> list[str]:
    if "profile" not in a:
        return ["-", "-", "-", "-"]
    return [
        " / ".join(f"{v:.2f}" for v in a["profile"]["factor"].values()),
        f"{a['profile_median_error']:.1%} / {a['profile_p90_error']:.1%}",
        f"{a['profile_interval_coverage']:.0%}",
        check(a["profile_met"]),
    ]


def report_b(results: dict[str, dict[str, Any]]) -> None:
    print_table(
        "(b) the per-GPU batch the plan recommends (from replayed 1- and 2-node studies) vs the best measured",
        ["job", *(f"{n}x{GPUS}: batch / best (share)" for n in SCALES), "target"],
        [
            [j, *(f"{s['batch']} / {s['best_batch']} ({s['of_best']:.1%})" for s in r["plan"]), check(r["plan_met"])]
            for j, r in results.items()
        ],
    )


def report_c(results: dict[str, dict[str, Any]]) -> None:
    print_table(
        "(c) goodput's global batch (noise scale projected to the run's end from its first 10% of steps) vs the "
        "fastest to the target; in brackets the choice from the noise scale read at 10% of the steps",
        [
            "job",
            "target metric",
            "B_noise: projected / at 10%",
            *(f"{n}x{GPUS}: chosen / fastest" for n in SCALES),
            "target",
            "at 10%",
        ],
        [
            [
                j,
                f"{g['target_metric']:.4g}",
                f"{g['noise_scale']:,.0f} / {g['noise_scale_at_window_end']:,.0f}",
                *(
                    f"{s['choice']} / {s['fastest']} (+{s['over_fastest']:.0%}) "
                    f"[{s['choice_at_window_end']}: +{s['over_fastest_at_window_end']:.0%}]"
                    for s in g["scales"]
                ),
                check(g["met"]),
                check(g["met_at_window_end"]),
            ]
            for j, g in ((j, r["goodput"]) for j, r in results.items())
        ],
    )


def report(results: dict[str, dict[str, Any]], parts: tuple[str, ...]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    if "a" in parts:
        report_a(results)
        summary["a_jobs_met"] = sum(r["prediction"]["met"] for r in results.values())
        summary["a_met"] = summary["a_jobs_met"] == len(results)
        summary["a_jobs_met_with_profile"] = sum(r["prediction"].get("profile_met", False) for r in results.values())
        widths = [r["prediction"]["profile_width"] for r in results.values() if "profile_width" in r["prediction"]]
        summary["a_jobs_met_by_width"] = {str(w): sum(by[str(w)]["met"] for by in widths) for w in WIDTHS}
    if "b" in parts:
        report_b(results)
        summary["b_jobs_met"] = sum(r["plan_met"] for r in results.values())
        summary["b_met"] = summary["b_jobs_met"] >= TARGET_JOBS
    if "c" in parts:
        report_c(results)
        summary["c_jobs_met"] = sum(r["goodput"]["met"] for r in results.values())
        summary["c_met"] = summary["c_jobs_met"] >= TARGET_JOBS
        summary["c_jobs_met_at_window_end"] = sum(r["goodput"]["met_at_window_end"] for r in results.values())
    lines = {
        "a": f"(a) median <= {TARGET_MEDIAN:.0%} and p90 <= {TARGET_P90:.0%}: "
        f"{summary.get('a_jobs_met')}/{len(results)} jobs (target: every job), with the network profile "
        f"{summary.get('a_jobs_met_with_profile')}/{len(results)} (weights' width 0.5, 2, all alike: "
        f"{', '.join(str(n) for n in summary.get('a_jobs_met_by_width', {}).values())})",
        "b": f"(b) >= {TARGET_BATCH:.0%} at every scale: {summary.get('b_jobs_met')}/{len(results)} jobs",
        "c": f"(c) within {TARGET_TIME:.0%} at every scale: {summary.get('c_jobs_met')}/{len(results)} jobs",
    }
    console.print("; ".join(lines[p] for p in PARTS if p in parts))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="(b) replays the studies")
    parser.add_argument("--bootstrap", type=int, default=100, help="refits behind (a)'s intervals")
    parser.add_argument("--quick", action="store_true", help="cifar10 and ncf, 20 refits")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    jobs = ["cifar10", "ncf"] if args.quick else args.jobs
    bootstrap = 20 if args.quick else args.bootstrap
    parts = tuple(p for p in PARTS if p in args.parts)
    quiet_optuna()
    started, machine = time.monotonic(), machine_facts()
    results = {}
    everyone = [Job.load(args.traces / name) for name in JOBS]  # the network profile learns from all but one
    with tempfile.TemporaryDirectory(prefix="autotune-pollux-") as folder:
        for job in (j for j in everyone if j.name in jobs):
            console.print(f"[bold]{job.name}[/bold]")
            profile = network_profile(job, everyone) if "a" in parts else None
            results[job.name] = run_job(job, bootstrap, Path(folder), parts, profile)
    summary = report(results, parts)
    settings = {
        "traces": str(args.traces),
        "jobs": jobs,
        "parts": parts,
        "bootstrap": bootstrap,
        "scales": SCALES,
        "gpus": GPUS,
        "early": EARLY,
    }
    partial = args.quick or tuple(jobs) != JOBS
    write_json(
        args.out or default_out("pollux_traces" + ("" if parts == PARTS else "_" + "".join(parts)), partial),
        "pollux_traces",
        settings,
        {"jobs": results, "summary": summary},
        machine,
        started,
    )


if __name__ == "__main__":
    main()
