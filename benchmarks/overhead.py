"""Launch overhead: the share of a trial's wall time not spent training.

Per trial, overhead = wall time (launch -> every process gone) - the training loop's span (rank 0, warm-up
steps included), i.e. launch, imports, rendezvous, building the workload and teardown; the benchmark
reports ``overhead_s / wall_s``. The MLP quickstart workload at its default configuration runs with the
warm launcher (the default: ranks forked from an interpreter that imported torch) and with a cold
``torchrun`` per trial, at world sizes 1 and 2, interleaved, ``--repeats`` times each. ``max_steps`` is
chosen per world size (from a probe trial) so that the training span is about ``--span-s`` seconds.

The warm launcher's one-off cost, starting its zygote (the warm interpreter), is paid by the first trial
of a study only: it is measured separately, on fresh launchers, as the first trial against the second.

Target: overhead <= 5% of a 20 s trial at world size 2 with the default (warm) launcher.

    python benchmarks/overhead.py            # full: about 8 minutes on 2 cores
    python benchmarks/overhead.py --quick    # smoke run: about a minute
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    REPO,
    RUNS,
    LauncherKind,
    Trials,
    check,
    console,
    default_out,
    interleaved,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    ratio,
    read_json,
    stage,
    warn_if_busy,
    write_json,
)

TARGET_RATIO = 0.05
TARGET_WORLD_SIZE = 2
KINDS: tuple[LauncherKind, ...] = ("warm", "torchrun")


def record(result: Any, launch_s: float | None) -> dict[str, Any]:
    """The numbers of one trial that this benchmark reports. ``launch_s``: the launcher's launch() call (the
    zygote start on a fresh warm launcher, a wait for cores another trial holds, fork or exec)."""
    overhead = result.overhead_s
    return {
        "outcome": result.outcome.value,
        "launch_s": None if launch_s is None else round(launch_s, 4),
        "wall_s": round(result.wall_s, 4),
        "training_span_s": round(result.training_span_s, 4),
        "overhead_s": None if overhead is None else round(overhead, 4),
        "overhead_ratio": None if overhead is None or not result.wall_s else round(overhead / result.wall_s, 5),
        "time_to_first_step_s": result.time_to_first_step_s,
        "throughput_samples_s": result.throughput_samples_s,
        "steps": result.steps,
        "trial_dir": result.trial_dir,
    }


def limits(max_steps: int, warmup: int, span_s: float) -> dict[str, Any]:
    return {
        "warmup_steps": warmup,
        "max_steps": max_steps,
        "max_seconds": 3 * span_s + 120,  # a generous cap: a slow trial is measured, not killed
        "hang_seconds": 60,
    }


def choose_steps(trials: Trials, world_size: int, span_s: float, warmup: int, probe_steps: int) -> dict[str, Any]:
    """Probe one trial (warm launcher) and pick max_steps for a training span of about ``span_s``."""
    config = trials.config({"world_size": world_size})
    result = trials.run(config, limits(probe_steps, warmup, 60), "warm", tag=f"probe-ws{world_size}")
    measured = result.steps - warmup
    if result.outcome.value != "complete" or measured <= 0 or result.training_s <= 0:
        raise SystemExit(f"the probe trial at world size {world_size} failed: {result.outcome} {result.reason}")
    step_s = result.training_s / measured  # measured steps only: the first steps are slower
    warmup_s = max(0.0, result.training_span_s - result.training_s)
    return {
        "world_size": world_size,
        "probe_step_s": round(step_s, 5),
        "max_steps": warmup + max(5, math.ceil((span_s - warmup_s) / step_s)),
        "probe": record(result, trials.last_launch_s("warm")),
    }


def zygote_cost(repeats: int, world_size: int) -> list[dict[str, Any]]:
    """On fresh warm launchers: the first trial (pays for starting the zygote) against the second."""
    out = []
    tiny = {"warmup_steps": 1, "max_steps": 4, "max_seconds": 180, "hang_seconds": 60}
    for i in range(repeats):
        with Trials(MLP, RUNS / "overhead" / f"zygote-{i}") as trials:
            config = trials.config({"world_size": world_size})
            first = record(trials.run(config, tiny, "warm", tag="first"), trials.last_launch_s("warm"))
            second = record(trials.run(config, tiny, "warm", tag="second"), trials.last_launch_s("warm"))
        out.append({"first": first, "second": second})
    return out


def summarize(arms: list[tuple[LauncherKind, int]], runs: list[list[dict[str, Any]]],
              steps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (kind, world_size), trials in zip(arms, runs, strict=True):
        ok = [t for t in trials if t["outcome"] == "complete" and t["overhead_ratio"] is not None]
        ratios = [t["overhead_ratio"] for t in ok]
        rows.append(
            {
                "launcher": kind,
                "world_size": world_size,
                "max_steps": steps[world_size]["max_steps"],
                "trials": len(trials),
                "complete": len(ok),
                "training_span_s": median([t["training_span_s"] for t in ok]),
                "wall_s": median([t["wall_s"] for t in ok]),
                "overhead_s": median([t["overhead_s"] for t in ok]),
                "overhead_ratio": median(ratios),
                "overhead_ratio_min": min(ratios) if ratios else None,
                "overhead_ratio_max": max(ratios) if ratios else None,
                "time_to_first_step_s": median([t["time_to_first_step_s"] for t in ok if t["time_to_first_step_s"]]),
                "launch_s": median([t["launch_s"] for t in ok if t["launch_s"] is not None]),
                "throughput_samples_s": median([t["throughput_samples_s"] for t in ok if t["throughput_samples_s"]]),
                "runs": trials,
            }
        )
    return rows


# -- between trials: where a quickstart study's time goes outside training -------------------------------

STUDY_FILE = REPO / "studies" / "quickstart.yaml"
GAP_TARGET_S = 0.2  # one trial's end (its processes gone) -> the next trial's first rank starting, median
TRAINING_SHARE_TARGET = 0.92  # of the search's wall time, inside training spans
OUTSIDE_PARTS = ("before_first_trial", "first_rank_to_training", "training_end_to_run_end", "between_trials",
                 "after_last_trial")
TUNER_SPANS = ("terminate", "attrs", "artifacts", "tell", "after_trial", "claim", "prepare", "launch")


def run_traced_study(folder: Path, tree: Path | None) -> Path:
    """``autotune run`` on a fresh copy of the quickstart study with ``AUTOTUNE_TRACE`` set; ``tree``: run the
    autotune of another source tree (a before/after comparison). Returns the trace file."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(STUDY_FILE, folder / STUDY_FILE.name)
    trace = folder / "trace.jsonl"
    env = {**os.environ, "AUTOTUNE_TRACE": str(trace)}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    with (folder / "run.log").open("wb") as log:
        # max_seconds raised: on a busy machine a trial would otherwise end as a timeout (nothing else changes)
        # (and no confirmation runs: only the search is measured)
        code = subprocess.run([sys.executable, "-m", "autotune.cli", "run", STUDY_FILE.name, "--set",
                               "trial.max_seconds=120", "--set", "confirm.top_k=0"], cwd=folder, env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=1800).returncode
    if code != 0:
        console.print(f"  [red]autotune run exited {code}[/]: see {folder / 'run.log'}")
    return trace


def _training_span(trial_dir: Path, events: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Rank 0's training span (epoch seconds): the whole loop of a trial that finished it; a pruned or stopped
    trial's from its start to the last window the monitor read (the rank's own clock, launch + elapsed)."""
    done = [e for e in events if e["span"] == "training"]
    if done:
        return done[0]["start"], done[0]["end"]
    starts = [e["start"] for e in events if e["span"] == "training_start"]
    if not starts:
        return None
    try:
        launched = json.loads((trial_dir / "config.json").read_text())["launched_at"]
        windows = json.loads((trial_dir / "result.json").read_text())["windows"]
    except (OSError, ValueError, KeyError):
        return None
    if not windows:
        return None
    return starts[0], max(starts[0], launched + windows[-1]["elapsed_s"])


def analyse_trace(trace: Path) -> dict[str, Any]:
    """The search phase of one traced study (the tuner's start to its last search trial, before confirmation):
    its wall time, the share inside training spans, and per trial the gap from its end to the next trial's
    first rank, with the tuner's spans in between."""
    events = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    begin = min(e["start"] for e in events if e["span"] == "tuner_run")
    ends = [e["start"] for e in events if e["span"] == "search_end"]
    end = ends[0] if ends else max(e["end"] for e in events)
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if "trial_dir" in e:
            by_dir.setdefault(e["trial_dir"], []).append(e)
    trials = []
    for trial_dir, evs in by_dir.items():
        run = [e for e in evs if e["span"] == "run_trial"]
        if not run or run[0]["start"] > end:
            continue  # a confirmation run
        ranks = [e["start"] for e in evs if e["span"] == "rank_start"]
        span = _training_span(Path(trial_dir), evs)
        trials.append({"trial": run[0]["trial"], "trial_dir": trial_dir, "run_start": run[0]["start"],
                       "run_end": run[0]["end"], "first_rank": min(ranks) if ranks else None,
                       "training": span})
    trials.sort(key=lambda t: t["trial"])
    training_s = sum(t["training"][1] - t["training"][0] for t in trials if t["training"])
    gaps = []
    for prev, nxt in itertools.pairwise(trials):
        if nxt["first_rank"] is None:
            continue
        between = {name: round(sum(e["end"] - e["start"] for e in events if e["span"] == name and (
            prev["run_end"] - 5 <= e["start"] and e["end"] <= nxt["first_rank"] + 0.001) and (
            e.get("trial") in (None, prev["trial"], nxt["trial"]))), 4) for name in TUNER_SPANS}
        # terminate belongs to the trial that ended; launch to the next one: both counted by time window
        gaps.append({"after_trial": prev["trial"], "gap_s": round(nxt["first_rank"] - prev["run_end"], 4),
                     "training_end_to_run_end_s": None if prev["training"] is None
                     else round(prev["run_end"] - prev["training"][1], 4), "spans_s": between})
    wall = end - begin
    first_rank = trials[0]["first_rank"] if trials and trials[0]["first_rank"] else None
    return {
        "trials": len(trials),
        "search_wall_s": round(wall, 3),
        "training_s": round(training_s, 3),
        "training_share": round(training_s / wall, 4) if wall > 0 else None,
        "start_to_first_rank_s": None if first_rank is None else round(first_rank - begin, 3),
        "gap_s_median": median([g["gap_s"] for g in gaps]),
        "gaps": gaps,
        "outside_training_s": outside_training(trials, gaps, begin, end),
    }


def outside_training(trials: list[dict[str, Any]], gaps: list[dict[str, Any]], begin: float,
                     end: float) -> dict[str, float]:
    """Where the search's time outside training spans went, in seconds, summed over its trials: before the
    first trial's first rank; each trial's first rank to rank 0's training span (building the workload, the
    DataLoader, DDP); its training span's end to its run's end (held-out evaluation, exit, teardown); the
    gaps between trials (a trial's end to the next one's first rank: the tuner's tell and ask, the launch);
    after the last trial. With the training spans they add up to the search's wall time (a trial without a
    traced span counts in none of them)."""
    timed = [t for t in trials if t["first_rank"] is not None and t["training"] is not None]
    parts = {
        "before_first_trial": (trials[0]["first_rank"] or trials[0]["run_start"]) - begin if trials else 0.0,
        "first_rank_to_training": sum(t["training"][0] - t["first_rank"] for t in timed),
        "training_end_to_run_end": sum(t["run_end"] - t["training"][1] for t in timed),
        "between_trials": sum(g["gap_s"] for g in gaps),
        "after_last_trial": end - trials[-1]["run_end"] if trials else 0.0,
    }
    return {name: round(value, 3) for name, value in parts.items()}


def study_rows(label: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a tree's rounds (each round's own median gap)."""
    spans = {name: median([median([g["spans_s"][name] for g in r["gaps"]]) or 0.0 for r in runs if r["gaps"]])
             for name in TUNER_SPANS}
    return {
        "code": label,
        "rounds": len(runs),
        "search_wall_s": median([r["search_wall_s"] for r in runs]),
        "training_share": median([r["training_share"] for r in runs if r["training_share"] is not None]),
        "training_share_min": min((r["training_share"] for r in runs if r["training_share"] is not None), default=None),
        "gap_s_median": median([r["gap_s_median"] for r in runs if r["gap_s_median"] is not None]),
        "training_end_to_run_end_s": median([median([g["training_end_to_run_end_s"] for g in r["gaps"]
                                                     if g["training_end_to_run_end_s"] is not None]) or 0.0
                                             for r in runs if r["gaps"]]),
        "start_to_first_rank_s": median([r["start_to_first_rank_s"] for r in runs if r["start_to_first_rank_s"]]),
        "spans_s": spans,
        "training_s": median([r["training_s"] for r in runs]),
        "outside_training_s": {part: median([r["outside_training_s"][part] for r in runs if "outside_training_s" in r])
                               for part in OUTSIDE_PARTS},
        "runs": runs,
    }


def between_trials(rounds: int, trees: dict[str, Path | None], *, reuse: bool = False) -> dict[str, Any]:
    """``rounds`` traced quickstart studies per source tree, interleaved; medians and the targets. ``reuse``:
    read the traces a run left in benchmarks/runs/overhead/study/ instead of running (a round without a
    trace is left out)."""
    labels = list(trees)
    loads = []

    def one(label: str, i: int) -> dict[str, Any] | None:
        folder = RUNS / "overhead" / "study" / f"{label}-{i}"
        loads.append(round(os.getloadavg()[0], 2))
        if reuse and not (folder / "trace.jsonl").exists():
            return None
        trace = folder / "trace.jsonl" if reuse else run_traced_study(folder, trees[label])
        found = analyse_trace(trace)
        console.print(f"  {label} #{i + 1}: search {found['search_wall_s']:.1f} s, training "
                      f"{pct(found['training_share'])}, median gap {found['gap_s_median']} s (load {loads[-1]})")
        return found

    with stage(f"between trials: {rounds} traced quickstart studies x {', '.join(labels)}, interleaved"):
        runs = interleaved(labels, rounds, one)
    rows = [study_rows(label, [x for x in r if x is not None]) for label, r in zip(labels, runs, strict=True)]
    print_table(
        "Between trials: the quickstart study's search (autotune run, traced), median over rounds",
        ["code", "rounds", "search s", "in training", "min", "gap s (end -> next rank)", "train end -> run end s",
         *[f"{n} s" for n in TUNER_SPANS]],
        [[r["code"], r["rounds"], r["search_wall_s"], pct(r["training_share"]), pct(r["training_share_min"]),
          r["gap_s_median"], r["training_end_to_run_end_s"], *[r["spans_s"][n] for n in TUNER_SPANS]]
         for r in rows],
    )
    parts = list(OUTSIDE_PARTS)
    print_table(
        "Outside training: seconds of the search, summed over its trials (median over rounds)",
        ["code", "search s", "training s", *parts],
        [[r["code"], r["search_wall_s"], r["training_s"], *[r["outside_training_s"][p] for p in parts]] for r in rows],
    )
    last = rows[-1]
    share, gap = last["training_share"], last["gap_s_median"]
    met = {"training_share": None if share is None else share >= TRAINING_SHARE_TARGET,
           "gap": None if gap is None else gap <= GAP_TARGET_S}
    console.print(f"target: >= {pct(TRAINING_SHARE_TARGET)} of the search in training spans ({last['code']}: "
                  f"{pct(last['training_share'])}) -> {check(met['training_share'])}; median gap <= {GAP_TARGET_S} s "
                  f"({last['gap_s_median']} s) -> {check(met['gap'])}")
    return {"rows": rows, "load_avg_1m_per_round": loads,
            "target": {"training_share_min": TRAINING_SHARE_TARGET, "gap_s_max": GAP_TARGET_S, "met": met}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: short trials, one repeat")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/overhead.json)")
    parser.add_argument("--repeats", type=int, help="trials per launcher and world size (default 5; quick 1)")
    parser.add_argument("--span-s", type=float, help="training span per trial in seconds (default 20; quick 3)")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--zygote-repeats", type=int, help="fresh warm launchers timed (default 3; quick 1)")
    parser.add_argument("--study-rounds", type=int,
                        help="traced quickstart studies per source tree (default 3; quick 1; 0: none)")
    parser.add_argument("--study-only", action="store_true", help="only the between-trials profile; its numbers go"
                        " into the existing JSON's between_trials, the launch overhead's stay")
    parser.add_argument("--from-runs", action="store_true", help="with --study-only: analyse the traces of an"
                        " earlier run (benchmarks/runs/overhead/study/) instead of running studies")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="also profile the autotune of another source tree (e.g. before=/tmp/old), interleaved")
    args = parser.parse_args(argv)
    pairs = (t.split("=", 1) for t in args.tree)
    trees: dict[str, Path | None] = {label: Path(path).resolve() for label, path in pairs}
    trees["this"] = None
    study_rounds = args.study_rounds if args.study_rounds is not None else (1 if args.quick else 3)
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    span_s = args.span_s or (3.0 if quick else 20.0)
    zygote_repeats = args.zygote_repeats if args.zygote_repeats is not None else (1 if quick else 3)
    warmup = 3
    out = args.out or default_out("overhead", quick)

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    if args.study_only:
        found = between_trials(study_rounds, trees, reuse=args.from_runs)
        saved = read_json(out) if out.exists() else {"settings": {}, "results": {}}
        saved["results"]["between_trials"] = {**found, "machine": machine, "date": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}
        write_json(out, "overhead", {**saved["settings"], "study_rounds": study_rounds,
                                     "trees": {k: str(v) for k, v in trees.items()}},
                   saved["results"], saved.get("machine", machine), started)
        return
    with Trials(MLP, RUNS / "overhead" / "main") as trials:
        with stage("probing step times (the first probe also starts the warm launcher's zygote)"):
            steps = {ws: choose_steps(trials, ws, span_s, warmup, 12 if quick else 25) for ws in args.world_sizes}
        for ws, chosen in steps.items():
            console.print(f"  world size {ws}: {chosen['probe_step_s'] * 1000:.1f} ms/step -> "
                          f"max_steps {chosen['max_steps']}")
        arms: list[tuple[LauncherKind, int]] = [(kind, ws) for ws in args.world_sizes for kind in KINDS]

        def run(arm: tuple[LauncherKind, int], repeat: int) -> dict[str, Any]:
            kind, ws = arm
            config = trials.config({"world_size": ws})
            result = trials.run(config, limits(steps[ws]["max_steps"], warmup, span_s), kind, tag=f"{kind}-ws{ws}")
            rec = record(result, trials.last_launch_s(kind))
            console.print(
                f"  {kind:8s} ws={ws} #{repeat + 1}: {rec['outcome']}, wall {rec['wall_s']:.2f} s, "
                f"overhead {rec['overhead_s'] if rec['overhead_s'] is None else round(rec['overhead_s'], 2)} s "
                f"({pct(rec['overhead_ratio'])})"
            )
            return rec

        with stage(f"{len(arms)} arms x {repeats} repeats, interleaved"):
            runs = interleaved(arms, repeats, run)
    with stage(f"zygote start cost: {zygote_repeats} fresh warm launcher(s), first trial vs second"):
        zygote = zygote_cost(zygote_repeats, TARGET_WORLD_SIZE)

    between = between_trials(study_rounds, trees) if study_rounds > 0 else None
    rows = summarize(arms, runs, steps)
    by_arm = {(r["launcher"], r["world_size"]): r for r in rows}
    target_row = by_arm.get(("warm", TARGET_WORLD_SIZE))
    met = None if target_row is None or target_row["overhead_ratio"] is None else (
        target_row["overhead_ratio"] <= TARGET_RATIO
    )
    firsts = [z["first"] for z in zygote if z["first"]["time_to_first_step_s"]]
    seconds = [z["second"] for z in zygote if z["second"]["time_to_first_step_s"]]
    zygote_summary = {
        "world_size": TARGET_WORLD_SIZE,
        "first_time_to_first_step_s": median([z["time_to_first_step_s"] for z in firsts]),
        "later_time_to_first_step_s": median([z["time_to_first_step_s"] for z in seconds]),
        "first_launch_s": median([z["launch_s"] for z in firsts if z["launch_s"] is not None]),
        "later_launch_s": median([z["launch_s"] for z in seconds if z["launch_s"] is not None]),
        "first_overhead_s": median([z["overhead_s"] for z in firsts if z["overhead_s"] is not None]),
        "later_overhead_s": median([z["overhead_s"] for z in seconds if z["overhead_s"] is not None]),
    }
    # Time to first step does not count a wait for cores another trial holds (the launch time is reset
    # after a wait); wall time and launch() do. The one-off cost is read from the time to first step.
    one_off = None
    if zygote_summary["first_time_to_first_step_s"] is not None and zygote_summary["later_time_to_first_step_s"]:
        one_off = zygote_summary["first_time_to_first_step_s"] - zygote_summary["later_time_to_first_step_s"]
    zygote_summary["one_off_cost_s"] = one_off

    print_table(
        "Launch overhead per trial: (wall - training span) / wall, median over repeats",
        ["launcher", "ranks", "max_steps", "ok/trials", "span s", "wall s", "overhead s", "overhead",
         "min-max", "first step s", "launch() s"],
        [
            [r["launcher"], r["world_size"], r["max_steps"], f"{r['complete']}/{r['trials']}", r["training_span_s"],
             r["wall_s"], r["overhead_s"], pct(r["overhead_ratio"]),
             f"{pct(r['overhead_ratio_min'])}-{pct(r['overhead_ratio_max'])}", r["time_to_first_step_s"],
             r["launch_s"]]
            for r in rows
        ],
        caption=machine_caption(machine),
    )
    comparisons = []
    for ws in args.world_sizes:
        warm, cold = by_arm[("warm", ws)], by_arm[("torchrun", ws)]
        comparisons.append(
            {
                "world_size": ws,
                "overhead_s_torchrun_over_warm": ratio(cold["overhead_s"], warm["overhead_s"]),
                "time_to_first_step_torchrun_over_warm": ratio(cold["time_to_first_step_s"],
                                                               warm["time_to_first_step_s"]),
                "overhead_s_saved_by_warm": None if cold["overhead_s"] is None or warm["overhead_s"] is None
                else cold["overhead_s"] - warm["overhead_s"],
            }
        )
    print_table(
        "Cold torchrun against the warm launcher (same run, interleaved)",
        ["ranks", "overhead torchrun/warm", "first step torchrun/warm", "seconds saved per trial"],
        [[c["world_size"], c["overhead_s_torchrun_over_warm"], c["time_to_first_step_torchrun_over_warm"],
          c["overhead_s_saved_by_warm"]] for c in comparisons],
    )
    print_table(
        f"Warm launcher's one-off zygote start (fresh launchers, world size {TARGET_WORLD_SIZE}, median of "
        f"{len(zygote)})",
        ["trial", "time to first step s", "launch() s", "overhead s"],
        [
            ["first (starts the zygote)", zygote_summary["first_time_to_first_step_s"],
             zygote_summary["first_launch_s"], zygote_summary["first_overhead_s"]],
            ["second", zygote_summary["later_time_to_first_step_s"], zygote_summary["later_launch_s"],
             zygote_summary["later_overhead_s"]],
            ["one-off cost (first - second)", one_off, None, None],
        ],
    )
    target_value = None if target_row is None else target_row["overhead_ratio"]
    console.print(
        f"target: overhead <= {pct(TARGET_RATIO)} of a {span_s:g} s trial at world size {TARGET_WORLD_SIZE}, warm "
        f"launcher: {pct(target_value)} -> {check(met)}"
    )
    write_json(
        out,
        "overhead",
        {"quick": quick, "repeats": repeats, "span_s": span_s, "warmup_steps": warmup,
         "world_sizes": args.world_sizes, "zygote_repeats": zygote_repeats, "workload": MLP.entrypoint,
         "workload_args": dict(MLP.args), "config": "the workload's default (batch 64 per rank, no workers, fp32)"},
        {
            "steps": steps,
            "arms": rows,
            "torchrun_vs_warm": comparisons,
            "zygote": {"summary": zygote_summary, "runs": zygote},
            "target": {"overhead_ratio_max": TARGET_RATIO, "world_size": TARGET_WORLD_SIZE, "launcher": "warm",
                       "measured": target_value, "met": met},
            "between_trials": between,
        },
        machine,
        started,
    )


if __name__ == "__main__":
    main()
