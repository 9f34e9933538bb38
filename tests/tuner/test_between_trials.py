"""What the tuner does between two trials, made shorter (issue 20.2) without changing what it stores.

Replayed studies (the real tuner and SQLite storage, results from a known landscape): every finished trial
still has all its files as artifacts and all its attributes, also when the run is stopped by Ctrl-C; the
attributes written in one transaction are those Trial.set_user_attr writes; the default sampler handed to TPE
past its size keeps suggesting new, valid configurations, and the run says so; the trace is written only when
asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.artifacts import get_all_artifact_meta
from optuna.trial import TrialState

from autotune.samplers import PartialGPSampler
from autotune.search_space import TrialConfig, study_space
from autotune.trial_runner import TRACE_ENV
from autotune.tuner import Interrupted, Measured, NoLaunch, Tuner, replay_runner
from autotune.tuner._writes import set_user_attrs
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {
    "batch_size": {"choices": [8, 16, 32, 64, 128]},
    "num_workers": {"low": 0, "high": 2},
    "amp": {"choices": ["off", "bf16"]},
}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def landscape(config: TrialConfig, repeat: int) -> Measured:
    return Measured(500.0 + 3 * config.batch_size + 40 * config.num_workers + (60 if config.amp == "bf16" else 0))


def _files(trial_dir: str) -> set[str]:
    return {p.name for p in Path(trial_dir).iterdir() if p.is_file()}


def test_every_finished_trial_has_its_files_and_attributes_when_the_study_ends(
    study_dir: Callable[..., StudyDir],
) -> None:
    sd = study_dir("between-artifacts", search_space=SPACE, trial=TRIAL)
    spec = load_spec(str(sd.file))
    Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=6)
    study = sd.load()
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    assert len(finished) >= 6  # the search and the confirmation runs
    for t in finished:
        names = {m.filename for m in get_all_artifact_meta(t, storage=study._storage)}
        assert names == _files(t.user_attrs["trial_dir"]) and {"config.json", "result.json"} <= names, t.number
        for key in ("role", "config", "config_key", "worker", "outcome", "throughput_samples_s", "windows",
                    "wall_s", "trial_dir", "error_lines"):
            assert key in t.user_attrs, (t.number, key)


def test_after_ctrl_c_the_trials_that_finished_keep_their_artifacts(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("between-ctrl-c", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    spec = load_spec(str(sd.file))
    replay = replay_runner(landscape)
    calls = []

    def stopped_at_the_fourth(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return replay(*args, **kwargs)

    with pytest.raises(Interrupted):
        Tuner(spec, launcher=NoLaunch(), run_trial=stopped_at_the_fourth).run(n_trials=8)
    study = sd.load()
    done = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 3
    for t in done:
        names = {m.filename for m in get_all_artifact_meta(t, storage=study._storage)}
        assert names == _files(t.user_attrs["trial_dir"]), t.number
    stopped = study.trials[3]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["outcome"] == "interrupted"


def test_attributes_in_one_transaction_are_what_set_user_attr_stores(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'attrs.db'}"
    study = optuna.create_study(storage=storage)
    attrs = {"outcome": "complete", "windows": [[5, 1.5, None, 0.3]], "reason": "", "steps": 20, "ok": True}
    constraints = {"memory": -1.0, "diverged": 0.0}
    one, batched = study.ask(), study.ask()
    for key, value in attrs.items():
        one.set_user_attr(key, value)
    for name, limit in constraints.items():
        one.set_constraint(name, limit)
    artifact = {"artifacts:abc": '{"artifact_id": "abc", "filename": "result.json"}'}
    one.storage.set_trial_system_attr(one._trial_id, "artifacts:abc", artifact["artifacts:abc"])
    set_user_attrs(batched, attrs, constraints, artifact)
    assert batched.user_attrs == attrs  # the trial object sees them at once, as with set_user_attr
    study.tell(one, 1.0)
    study.tell(batched, 1.0)
    again = optuna.load_study(study_name=study.study_name, storage=storage).trials
    assert again[0].user_attrs == again[1].user_attrs == attrs
    assert again[0].system_attrs == again[1].system_attrs  # and what set_constraint and an artifact store
    assert again[0].constraints == again[1].constraints == constraints
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        set_user_attrs(batched, {"late": 1})
    assert "late" not in optuna.load_study(study_name=study.study_name, storage=storage).trials[1].user_attrs


def test_a_replayed_trial_costs_about_ten_write_transactions(study_dir: Callable[..., StudyDir]) -> None:
    # A trial's result is one transaction with its artifacts' metadata, its configuration one with its predicted
    # memory: 13.3 write transactions a trial when each was its own, 10.3 since (3 knobs, 2 windows).
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    writes: list[int] = []
    dirty: set[int] = set()

    def executed(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            dirty.add(id(conn))

    def committed(conn: Any) -> None:
        if id(conn) in dirty:
            dirty.discard(id(conn))
            writes.append(1)

    sd = study_dir("between-writes", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0},
                   sampler={"name": "random", "seed": 0})
    spec = load_spec(str(sd.file))
    event.listen(Engine, "before_cursor_execute", executed)
    event.listen(Engine, "commit", committed)
    try:
        Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=12)
    finally:
        event.remove(Engine, "before_cursor_execute", executed)
        event.remove(Engine, "commit", committed)
    trials = sd.load().trials
    assert len(trials) == 12
    # Each window reported is one more (the pruner's report): which trials run to their end moves the count (the
    # sampler repeating no configuration, one more of these 12 completes). Besides its windows, a trial costs 8.7.
    windows = sum(len(t.intermediate_values) for t in trials)
    assert (len(writes) - windows) / 12 <= 9.0, (len(writes) / 12, windows / 12)


def test_past_its_size_the_default_sampler_hands_over_to_tpe_and_suggests_new_valid_configurations(
    study_dir: Callable[..., StudyDir],
) -> None:
    sd = study_dir("between-handover", search_space=SPACE, trial=TRIAL, pruner={"name": "none"})
    spec = load_spec(str(sd.file))
    space = study_space(spec)
    Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=6)  # baseline + GP
    sampler = PartialGPSampler(seed=0, n_startup_trials=3, warn_independent_sampling=False, max_trials=6)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage_url(), sampler=sampler)
    distributions = space.distributions()
    for _ in range(8):
        trial = study.ask()
        config = space.suggest(trial)
        assert trial.number in sampler._by_tpe  # TPE's, not the GP's
        TrialConfig.model_validate(config.model_dump())
        for name, value in trial.params.items():
            dist = distributions[name]
            assert dist._contains(dist.to_internal_repr(value)), (name, value)
        study.tell(trial, landscape(config, 0).throughput_samples_s)
    finished = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") != "confirm"]
    keys = [json.dumps(t.params, sort_keys=True) for t in finished[-8:]]
    assert len(set(keys)) == len(keys)  # never a configuration the study has measured


def test_the_hand_over_to_tpe_is_said_once_recorded_on_each_trial_and_summed_up(
    study_dir: Callable[..., StudyDir], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its trial limit the default sampler hands over to TPE: the run says so when it happens (once), each
    search trial records which sampler proposed it (the baseline and the confirmation runs none), and the lines
    `autotune run` and `autotune status` end with name the trials TPE proposed."""
    from autotune.cli._run_summary import noise_lines
    from autotune.samplers import _factory
    from autotune.tuner import Observer

    class Small(PartialGPSampler):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "max_trials": 6})

    monkeypatch.setattr(_factory, "PartialGPSampler", Small)
    notes: list[str] = []

    class Notes(Observer):
        def note(self, line: str) -> None:
            notes.append(line)

    sd = study_dir("between-handover-said", search_space=SPACE, trial=TRIAL, pruner={"name": "none"})
    summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(landscape),
                    observer=Notes()).run(n_trials=10)
    trials = summary.study.get_trials(deepcopy=False)
    samplers = {t.number: t.user_attrs.get("sampler") for t in trials}
    roles = {t.number: t.user_attrs["role"] for t in trials}
    assert [samplers[n] for n in range(10)] == [None, *["gp"] * 5, *["tpe"] * 4]  # #0: the baseline
    assert all(samplers[n] is None for n, role in roles.items() if role == "confirm") and "confirm" in roles.values()
    said = [n for n in notes if "TPE" in n]
    assert said == ["trial #6: the GP's ask grows with every trial, so past 6 finished trials TPE proposes the rest "
                     "of the study (docs/reference/sampler.md)"]
    assert "trials #6-#9 (4) were proposed by TPE: the GP's ask grows with every trial, and past its trial limit " \
           "the default sampler hands over (docs/reference/sampler.md)" in noise_lines(summary)


def test_the_trace_is_written_only_when_asked_for(study_dir: Callable[..., StudyDir], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.jsonl"
    quiet = study_dir("between-untraced", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    monkeypatch.delenv(TRACE_ENV, raising=False)
    Tuner(load_spec(str(quiet.file)), launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=2)
    assert not trace.exists()
    traced = study_dir("between-traced", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    monkeypatch.setenv(TRACE_ENV, str(trace))
    Tuner(load_spec(str(traced.file)), launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=3)
    spans = [json.loads(line) for line in trace.read_text().splitlines()]
    names = {s["span"] for s in spans}
    assert {"tuner_run", "claim", "prepare", "run_trial", "attrs", "artifacts", "tell", "search_end"} <= names
    assert all(s["end"] >= s["start"] for s in spans)
    assert sorted({s["trial"] for s in spans if s["span"] == "tell"}) == [0, 1, 2]


def test_the_launcher_is_prepared_before_the_study_is_opened(study_dir: Callable[..., StudyDir]) -> None:
    # The warm launcher's zygote imports torch for seconds: it starts first, so that the tuner opens the
    # study, queues the baseline and loads the GP's modules meanwhile (issue 20.2: the start of a search).
    sd = study_dir("between-prepare", search_space=SPACE, trial=TRIAL)
    seen: list[bool] = []

    class Recording(NoLaunch):
        def prepare(self, plan: Any) -> None:
            seen.append(sd.db.exists())  # the SQLite file appears when the study is opened

    Tuner(load_spec(str(sd.file)), launcher=Recording(), run_trial=replay_runner(landscape)).run(n_trials=3)
    assert seen == [False]
    assert sd.db.exists()


PROBE = '''"""faulty.py's workload; at import it notes which processes the importing process has started."""
import json
import os
from pathlib import Path

import psutil

from faulty import build  # noqa: F401

with Path(__file__).with_name("imports.jsonl").open("a") as out:
    out.write(json.dumps({"pid": os.getpid(),
                          "children": [" ".join(p.cmdline()) for p in psutil.Process().children()]}) + "\\n")
'''


@pytest.mark.slow
def test_autotune_run_starts_the_zygote_before_it_imports_the_workload(study_dir: Callable[..., StudyDir]) -> None:
    # A real model's imports take seconds (transformers: ~5 s here), and so do the zygote's (torch, 3.4 s): the
    # CLI starts the zygote first, from the study file alone, so the two overlap (a 1-trial run of
    # studies/hf_gpt2.yaml: first rank 7.1 -> 5.2 s after the command started; benchmarks/README.md section 1).
    sd = study_dir("zygote-first", search_space={"batch_size": {"choices": [8, 16]}}, confirm={"top_k": 0})
    (sd.folder / "probe.py").write_text(PROBE)
    sd.file.write_text(sd.file.read_text().replace("faulty.py:build", "probe.py:build"))
    run = sd.popen("run", "study.yaml", "--n-trials", "1", log=sd.folder / "run.log")
    assert run.wait(timeout=180) == 0, (sd.folder / "run.log").read_text()
    imports = [json.loads(line) for line in (sd.folder / "imports.jsonl").read_text().splitlines()]
    in_cli = [i for i in imports if i["pid"] == run.pid]
    assert len(in_cli) == 1, imports  # the CLI imported the workload once, to check it
    assert any("autotune.trial_runner._zygote" in c for c in in_cli[0]["children"]), in_cli
    assert any(i["pid"] != run.pid for i in imports)  # and the trial's rank imported it too


#: `autotune run` in a fresh interpreter, noting for each process it starts whether torch was imported by then; the
#: workload's module fails at import, so the command stops at its workload check, after the zygote started.
BEFORE_TORCH = """import json, subprocess, sys
from autotune.cli import main
spawned = []
start = subprocess.Popen.__init__
def noting(self, args, *rest, **kwargs):
    spawned.append({"args": " ".join(map(str, args)), "torch": "torch" in sys.modules})
    start(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = noting
try:
    main(["run", "study.yaml", "--n-trials", "1"])
except SystemExit as end:
    print(json.dumps({"code": end.code, "spawned": spawned}))
"""


def test_autotune_run_starts_the_zygote_before_it_imports_torch(study_dir: Callable[..., StudyDir]) -> None:
    # The zygote imports torch for ~2 s, and so does the command itself (the tuner, 1.2 s): the zygote starts
    # first, from the study file alone, so the two overlap (a 1-trial quickstart run reaches its first rank at
    # 2.8 s, not 4.2: benchmarks/startup.py)
    sd = study_dir("zygote-before-torch", search_space={"batch_size": {"choices": [8, 16]}}, confirm={"top_k": 0})
    (sd.folder / "broken.py").write_text("raise ImportError('not today')\n")
    sd.file.write_text(sd.file.read_text().replace("faulty.py:build", "broken.py:build"))
    out = subprocess.run([sys.executable, "-c", BEFORE_TORCH], cwd=sd.folder, capture_output=True, text=True,
                         timeout=120)
    record = json.loads(out.stdout.splitlines()[-1])
    assert record["code"] == 2, out.stderr  # the broken workload: bad input
    zygotes = [s for s in record["spawned"] if "autotune.trial_runner._zygote" in s["args"]]
    assert [z["torch"] for z in zygotes] == [False], record


def test_a_sigterm_that_lands_where_python_swallows_exceptions_still_stops_the_run(
    study_dir: Callable[..., StudyDir], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGTERM whose handler runs inside a weakref callback or a __del__ (the garbage collector runs them between
    any two bytecodes: a run's storage calls free SQLAlchemy objects all the time) raises where Python prints
    "Exception ignored in ..." and goes on: the run went on to its last trial and exited 0. The next checkpoint
    (the next trial's ask) raises it again."""
    import signal

    sd = study_dir("between-swallowed", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    spec = load_spec(str(sd.file))
    replay = replay_runner(landscape)
    calls: list[int] = []

    class Freed:
        def __del__(self) -> None:  # what the garbage collector calls; an exception here is ignored
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # type: ignore[operator]

    def swallowed_at_the_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        result = replay(*args, **kwargs)
        if len(calls) == 2:
            Freed()  # freed at once: its __del__ runs the SIGTERM handler, and the Interrupted it raises is ignored
        return result

    printed: list[Any] = []  # what Python would print as "Exception ignored in ...", with a traceback
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    with pytest.raises(Interrupted) as stop:
        Tuner(spec, launcher=NoLaunch(), run_trial=swallowed_at_the_second).run(n_trials=6)
    assert stop.value.exit_code == 143
    assert len(calls) == 2  # stopped before a third trial ran
    assert printed == []  # the run's own stop is not an error to print beside its one line (CI printed one)
    assert sys.unraisablehook == printed.append  # the run's hook went with it
    trials = sd.load().get_trials(deepcopy=False)
    # the second told whole: its result recorded (the sampler is not seeded: a configuration slower than the
    # baseline is pruned by its windows, as it should be; CI drew one once)
    assert [t.user_attrs.get("outcome") in ("complete", "pruned") for t in trials[:2]] == [True, True], trials[:2]
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials[:2])
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # a later run starts without it: nothing pending stops it
    Tuner(spec, launcher=NoLaunch(), run_trial=replay).run(n_trials=3)
    after = sd.load().get_trials(deepcopy=False)
    assert len(after) == 3 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in after)


def test_a_stop_swallowed_inside_a_running_trial_ends_it_at_its_next_tick() -> None:
    """Inside a trial the heartbeat the monitor calls on every tick is the checkpoint; a new run starts with
    nothing pending."""
    import signal
    import time

    from autotune.tuner._recovery import Heartbeat, signals_as_interrupts

    class Freed:
        def __del__(self) -> None:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # type: ignore[operator]

    study = optuna.create_study()
    beat = Heartbeat(study, study.ask(), time.monotonic)
    with signals_as_interrupts():
        beat()  # nothing pending
        Freed()
        with pytest.raises(Interrupted) as stop:
            beat()
        assert stop.value.exit_code == 143
    with signals_as_interrupts():
        beat()  # a new run: the earlier one's stop is not pending
