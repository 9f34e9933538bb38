"""Many workers, one study on PostgreSQL: do N concurrent `autotune run` workers run exactly the shared budget?

Starts ``--workers`` copies of ``autotune run STUDY --n-trials N`` at once against one PostgreSQL database
(a private server started here with initdb/pg_ctl, or ``--storage URL``), waits for them, then counts the
trials in the database: how many, whether their numbers are unique and gapless, how many count toward the
budget (overshoot = counted - N), how many baselines, how the work spread over the workers, and the wall
time. The workload is tests/trial_runner/faulty.py at 4 steps: the point is the bookkeeping, not the model.

Target: counted == N (no overshoot, nothing lost), numbers 0..N-1, one baseline.

``--replay 1 2 4 8``: how the storage scales instead. For each N, N workers share one fresh database and a
budget of N x ``--trials-per-worker``; a worker is the real tuner (claim under the study lock, ask, tell,
artifacts, heartbeats) whose trials are replayed (``autotune.tuner.replay_runner``) and take ``--trial-s``
seconds of wall time without using a core, so the 2 cores are not the limit. Reported per N: trials per minute,
the tuner's storage time per trial (claim + prepare + attrs + artifacts + tell + after_trial, from the
``AUTOTUNE_TRACE`` spans), and duplicate or lost trial numbers (target: 0).

    python benchmarks/pg_workers.py                    # 4 workers x 25 trials: about 2 min on 2 cores
    python benchmarks/pg_workers.py --quick            # 4 workers, 12 trials
    python benchmarks/pg_workers.py --storage postgresql+psycopg://user@host/db
    python benchmarks/pg_workers.py --replay 1 2 4 8   # storage scaling, replayed trials: about 5 min
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import REPO, RUNS, check, console, default_out, machine_caption, machine_facts, print_table, write_json

from autotune.trial_runner import free_port as _free_port

STUDY = """
name: pg-workers
storage: {url}
workload:
  entrypoint: faulty.py:build
  args: {{samples: 512}}
search_space:
  batch_size: {{choices: [8, 16, 32]}}
trial: {{warmup_steps: 1, max_steps: 4, max_seconds: 60, report_every: 1}}
sampler: {{name: random, seed: 0}}
pruner: {{name: none}}
confirm: {{top_k: 0}}
"""


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """A throw-away PostgreSQL on a free local port (trust auth, fsync off); yields its base URL."""
    found = shutil.which("initdb") or max(glob.glob("/usr/lib/postgresql/*/bin/initdb"), default=None)
    if found is None:
        raise SystemExit("PostgreSQL is not installed (apt-get install postgresql); or give --storage URL")
    bin_dir = Path(found).parent
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-bench-"))
    root.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    port = _free_port()
    run = {"capture_output": True, "text": True, "timeout": 120, "check": True}
    subprocess.run(_as_postgres([str(bin_dir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "autotune",
                                 "--no-sync"]), **run)  # type: ignore[call-overload]
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_postgres([str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-o", options, "-l",
                                 str(root / "log"), "-w", "start"]), **run)  # type: ignore[call-overload]
    try:
        yield f"postgresql+psycopg://autotune@127.0.0.1:{port}"
    finally:
        subprocess.run(_as_postgres([str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(server: str) -> str:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.replace("postgresql+psycopg://", "postgresql://") + "/postgres",
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def run_workers(url: str, workers: int, n_trials: int, folder: Path) -> tuple[float, list[int]]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "faulty.py").write_text((REPO / "tests" / "trial_runner" / "faulty.py").read_text())
    study = folder / "study.yaml"
    study.write_text(STUDY.format(url=url))
    started = time.monotonic()
    procs = []
    for i in range(workers):
        with (folder / f"worker{i}.log").open("wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "autotune.cli", "run", str(study),
                                           "--n-trials", str(n_trials)], cwd=folder, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=3600) for p in procs]
    return time.monotonic() - started, codes


def count(url: str, n_trials: int) -> dict[str, Any]:
    """What the database holds: the numbers this benchmark is about."""
    import optuna

    from autotune.tuner import counts_toward_budget

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name="pg-workers", storage=url).get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    counted = sum(counts_toward_budget(t) for t in trials)
    per_worker = Counter(str(t.user_attrs.get("worker", {}).get("pid")) for t in trials)
    return {
        "trials": len(trials),
        "counted": counted,
        "overshoot": counted - n_trials,
        "unique_gapless_numbers": sorted(numbers) == list(range(len(trials))),
        "states": dict(Counter(t.state.name for t in trials)),
        "outcomes": dict(Counter(str(t.user_attrs.get("outcome")) for t in trials)),
        "baselines": sum(t.user_attrs.get("role") == "baseline" for t in trials),
        "trials_per_worker": dict(sorted(per_worker.items())),
    }


STORAGE_SPANS = ("claim", "prepare", "attrs", "artifacts", "tell", "after_trial")


def replay_worker(study_file: str, n_trials: int, trial_s: float) -> None:  # pragma: no cover - a subprocess
    """One worker of ``--replay``: the real tuner on the shared study, each trial replayed in ``trial_s`` s."""
    from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
    from autotune.workload_check import load_spec

    replay = replay_runner(lambda config, seen: Measured(1000.0 + config.batch_size))

    def run(*args: Any, **kwargs: Any) -> Any:
        time.sleep(trial_s)  # the trial's wall time, without its CPU
        return replay(*args, **kwargs)

    Tuner(load_spec(study_file), launcher=NoLaunch(), run_trial=run).run(n_trials=n_trials)


def replay_round(server: str, workers: int, n_trials: int, trial_s: float) -> dict[str, Any]:
    import json
    import statistics

    url = fresh_database(server)
    folder = RUNS / f"pg_replay-{workers}-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    (folder / "faulty.py").write_text((REPO / "tests" / "trial_runner" / "faulty.py").read_text())
    study = folder / "study.yaml"
    study.write_text(STUDY.format(url=url))
    started = time.monotonic()
    procs = []
    for i in range(workers):
        env = {**os.environ, "AUTOTUNE_TRACE": str(folder / f"trace{i}.jsonl")}
        with (folder / f"worker{i}.log").open("wb") as log:
            procs.append(subprocess.Popen([sys.executable, __file__, "--replay-worker", str(study), str(n_trials),
                                           str(trial_s)], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=3600) for p in procs]
    wall = time.monotonic() - started
    found = count(url, n_trials)
    storage_s = []  # per worker: its storage spans over its trials
    for i in range(workers):
        path = folder / f"trace{i}.jsonl"
        spans = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        told = sum(span["span"] == "tell" for span in spans)
        if told:
            storage_s.append(sum(x["end"] - x["start"] for x in spans if x["span"] in STORAGE_SPANS) / told)
    return {**found, "workers": workers, "n_trials": n_trials, "exit_codes": codes, "wall_s": round(wall, 1),
            "trials_per_min": round(found["trials"] / wall * 60, 1),
            "storage_s_per_trial": round(statistics.median(storage_s), 4) if storage_s else None,
            "lost_or_duplicate": n_trials - found["counted"] if found["unique_gapless_numbers"] else None,
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}


def replay_main(args: argparse.Namespace) -> None:
    machine = machine_facts()
    started = time.monotonic()
    rows = []
    with contextlib.ExitStack() as stack:
        server = args.storage or stack.enter_context(private_postgres())
        for workers in args.replay:
            console.print(f"{workers} replaying worker(s), {workers * args.trials_per_worker} trials of "
                          f"{args.trial_s:g} s")
            rows.append(replay_round(server, workers, workers * args.trials_per_worker, args.trial_s))
    ok = all(r["unique_gapless_numbers"] and r["overshoot"] == 0 and not any(r["exit_codes"]) for r in rows)
    print_table(
        f"PostgreSQL: N workers on one study, replayed trials of {args.trial_s:g} s",
        ["workers", "budget", "trials", "trials/min", "x 1 worker", "storage s / trial", "numbers 0..N-1",
         "overshoot", "wall s", "load"],
        [[r["workers"], r["n_trials"], r["trials"], r["trials_per_min"],
          round(r["trials_per_min"] / rows[0]["trials_per_min"], 2), r["storage_s_per_trial"],
          r["unique_gapless_numbers"], r["overshoot"], r["wall_s"], r["load_avg_1m_at_end"]] for r in rows],
        caption=machine_caption(machine),
    )
    write_json(args.out or default_out("pg_workers_replay", args.quick), "pg_workers_replay",
               {"workers": args.replay, "trials_per_worker": args.trials_per_worker, "trial_s": args.trial_s,
                "storage": "given" if args.storage else "private PostgreSQL"},
               {"rounds": rows, "target_met": ok}, machine, started)
    if not ok:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--trials-per-worker", type=int, default=25, help="the shared budget is workers x this")
    parser.add_argument("--storage", help="a PostgreSQL server URL without database (default: start one here)")
    parser.add_argument("--quick", action="store_true", help="4 workers, 12 trials")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--replay", type=int, nargs="+", metavar="N", help="storage scaling with replayed trials"
                        " for each number of workers N (e.g. 1 2 4 8)")
    parser.add_argument("--trial-s", type=float, default=1.0, help="--replay: a replayed trial's wall time")
    parser.add_argument("--replay-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay_worker:
        study_file, n, trial_s = args.replay_worker
        replay_worker(study_file, int(n), float(trial_s))
        return
    if args.replay:
        if args.quick:
            args.trials_per_worker = 4
        replay_main(args)
        return
    if args.quick:
        args.trials_per_worker = 3
    n_trials = args.workers * args.trials_per_worker
    machine = machine_facts()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        server = args.storage or stack.enter_context(private_postgres())
        url = fresh_database(server)
        folder = RUNS / f"pg_workers-{uuid.uuid4().hex[:6]}"
        console.print(f"{args.workers} workers, a shared budget of {n_trials} trials, trial folders in {folder}")
        wall, codes = run_workers(url, args.workers, n_trials, folder)
        found = count(url, n_trials)
    ok = found["counted"] == n_trials and found["unique_gapless_numbers"] and found["baselines"] == 1
    results = {**found, "workers": args.workers, "n_trials": n_trials, "exit_codes": codes, "wall_s": round(wall, 1),
               "trials_per_min": round(found["trials"] / wall * 60, 1), "target_met": ok}
    print_table(
        "PostgreSQL workers sharing one budget",
        ["workers", "budget", "trials", "counted", "overshoot", "numbers 0..N-1", "baselines", "wall s",
         "trials/min", "target"],
        [[args.workers, n_trials, found["trials"], found["counted"], found["overshoot"],
          found["unique_gapless_numbers"], found["baselines"], round(wall, 1), results["trials_per_min"], check(ok)]],
        caption=machine_caption(machine),
    )
    console.print(f"trials per worker (pid: count): {found['trials_per_worker']}")
    write_json(args.out or default_out("pg_workers", args.quick), "pg_workers",
               {"workers": args.workers, "trials_per_worker": args.trials_per_worker, "storage": "given"
                if args.storage else "private PostgreSQL"}, results, machine, started)
    if not ok or any(codes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
