"""The confirmation race: the search's best configurations and the baseline, measured side by side.

Where the launcher can pace its runs (autotune/trial_runner/_pace.py) and the study has one throughput
objective, the confirmation is a race (``confirm.method: race``, the default). Every entrant — the
``confirm.top_k`` best configurations, the near misses that fill an empty place (``near_misses``), and the
baseline as the anchor — is launched and warmed up once, then measured in rounds: each alive entrant trains
one block of about ``confirm.block_s`` seconds, in an order shuffled every round, while the others are frozen.
After ``MIN_ROUNDS`` rounds, each round: an entrant the leader is separated from is dropped (its processes
ended; the baseline is never dropped), and the race stops once the leader is separated from every other
entrant and its speed-up over the baseline is known to ``confirm.precision`` (autotune/objectives/_race.py:
within-round ratios, the drift fitted away), or at ``confirm.rounds``, or when the study's ``timeout_s`` is
near. Each entrant is one confirmation trial (role ``confirm``, ``race: true``); the readings of every round
are the study attribute ``autotune_race``, from which :func:`autotune.objectives.choose` makes the choice.
Entrants are kept alive together only as far as their memory fits the device (autotune/tuner/_race_memory.py);
past that, one not resident is launched again for its block, down to paired alternation.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.objectives import MIN_ROUNDS, RACE_ATTR, lighter, standing
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.trial_result import TrialResult
from autotune.trial_runner import Launcher, PacedRun, plan_for
from autotune.trial_runner import run_trial as live_run_trial
from autotune.tuner._confirmation import _baseline_group, confirmation_record, near_misses, top_groups
from autotune.tuner._entrants import (
    Enter,
    EntrantFailed,
    OpenEntrant,
    Runner,
    Tell,
    block_timeout,
    entrant_result,
    paired_candidates,
    start_entrant,
)
from autotune.tuner._observer import Observer
from autotune.tuner._race_memory import Residency, make_room, relaunching, residency
from autotune.tuner._recovery import heartbeats
from autotune.tuner._results import measured_groups
from autotune.tuner._telling import tell_interrupted

THROUGHPUT = "throughput_samples_s"


def can_race(spec: StudySpec) -> bool:
    """Whether the study's confirmation is a race: asked for, one objective, throughput."""
    return (spec.confirm.method == "race" and spec.confirm.top_k > 0 and len(spec.objectives) == 1
            and spec.objectives[0].key == THROUGHPUT)


def race(
    study: optuna.Study,
    spec: StudySpec,
    open_entrant: OpenEntrant,
    *,
    enter: Enter,
    tell: Tell,
    observer: Observer,
    clock: Callable[[], float] = time.monotonic,
    deadline: float | None = None,
    beat: Callable[[optuna.Trial], None] = lambda trial: None,
) -> bool:
    """Race the study's best configurations against its baseline (module docstring). False, with nothing
    started, when there is no baseline measurement to anchor the race to (the caller confirms by re-runs)."""
    settings = spec.confirm
    groups = measured_groups(study, spec)
    baseline = _baseline_group(study, groups)
    if baseline is None:
        return False
    candidates = paired_candidates(study, spec, groups, settings.top_k)  # by the ratios to the search's anchor
    if candidates is None:  # an unpaired search: the best medians, then the near misses
        candidates = top_groups(groups, spec, settings.top_k)
        for group in near_misses(study, spec, groups, settings.top_k - len(candidates)):
            observer.note(f"trial #{group.trials[0]} was pruned within two runs' scatter of the best and fewer than "
                          "confirm.top_k configurations ran to their end: it races too")
            candidates.append(group)
    entrants = [baseline] + [g for g in candidates if g.config_key != baseline.config_key]
    if len(entrants) < 2:
        return False
    rng = random.Random(spec.sampler.seed)
    runners: dict[str, Runner] = {}
    fit = residency(study, spec, entrants)  # alive together only as far as their memory fits the device
    record: dict[str, Any] = {"anchor": baseline.config_key, "entrants": {}, "rounds": [], "block_s": settings.block_s,
                              "memory": fit.to_json()}
    observer.note(f"confirmation race: {len(entrants) - 1} configuration(s) and the baseline, blocks of "
                  f"~{settings.block_s:g} s in shuffled rounds, until the leader separates (at most {settings.rounds})")
    if fit.mode != "race":
        observer.note(fit.line())
        open_entrant = relaunching(open_entrant)
    with _closing(study, spec, runners, tell):
        for group in entrants:
            runner = start_entrant(study, spec, group, open_entrant, enter, beat)
            runners[group.config_key] = runner
            if runner.failed is not None:
                if group is baseline:
                    observer.note(f"the race's baseline could not start ({runner.failed}): confirming by re-runs")
                    return False
                observer.note(f"trial #{runner.trial.number} (#{group.trials[0]} racing) failed: {runner.failed}")
            record["entrants"][group.config_key] = {
                "trials": [*group.trials[:1], runner.trial.number], "config": dict(group.config),
                "peak_memory_mb": group.peak_memory_mb, "loss": group.loss,
            }
        _rounds(study, spec, runners, record, observer=observer, rng=rng, clock=clock, deadline=deadline, beat=beat,
                fit=fit)
    return True


def _rounds(
    study: optuna.Study, spec: StudySpec, runners: dict[str, Runner], record: dict[str, Any], *,
    observer: Observer, rng: random.Random, clock: Callable[[], float], deadline: float | None,
    beat: Callable[[optuna.Trial], None], fit: Residency,
) -> None:
    """The race's rounds, until it is decided, out of rounds, or out of time (module docstring). Where not every
    entrant fits the device alive, residents are ended to make room before a block (:func:`make_room`)."""
    settings, anchor = spec.confirm, record["anchor"]
    alive = [k for k, r in runners.items() if r.failed is None]
    started = clock()
    for number in range(1, settings.rounds + 1):
        order = list(alive)
        rng.shuffle(order)
        reading: dict[str, float] = {}
        for place, key in enumerate(order):
            runner = runners[key]
            try:
                if fit.mode != "race":
                    make_room(fit, {k: r.entrant for k, r in runners.items()}, order, place)
                window = runner.entrant.block(block_timeout(spec))
            except (EntrantFailed, RuntimeError) as e:
                runner.failed = str(e)
                observer.racing(f"trial #{runner.trial.number} failed in the race: {e}")
                continue
            reading[key] = window.window_throughput_samples_s
            fit.observe(key, window.peak_memory_mb)
            beat(runner.trial)
        record["rounds"].append(reading)
        record["round_s"] = (clock() - started) / number
        alive = [k for k in alive if runners[k].failed is None]
        if anchor not in alive or len(alive) < 2:
            record["stopped"] = "an entrant failed"
            break
        stop = _judge(record, alive, number, settings.precision, settings.rounds)
        study.set_user_attr(RACE_ATTR, record)
        now = standing(record["rounds"], anchor, alive)
        observer.racing(_progress(number, now, runners))
        for key in stop.dropped:
            alive.remove(key)
            runners[key].end(float(spec.trial.max_seconds))
            observer.racing(f"#{runners[key].group.trials[0]} dropped: {_why_dropped(key, record, stop)}")
        if stop.reason:
            for key, why in stop.kept_for.items():
                observer.racing(f"a tie: #{runners[key].group.trials[0]} passed over for {why}")
            record["stopped"] = stop.reason
            break
        if deadline is not None and clock() + record["round_s"] > deadline:
            record["stopped"] = "the study's timeout_s"
            break
    else:
        record["stopped"] = "confirm.rounds"
    study.set_user_attr(RACE_ATTR, record)


@dataclass
class _Stop:
    dropped: list[str] = field(default_factory=list)
    reason: str = ""
    kept_for: dict[str, str] = field(default_factory=dict)  # a tied leader passed over: for which, and why


def _judge(record: dict[str, Any], alive: list[str], number: int, precision: float, most: int) -> _Stop:
    """After a round: who is dropped, and whether the race is over (decided, or a tie no affordable number of
    rounds would part, with the speed-up known to ``precision``).

    A runner-up that ``confirm.rounds`` could not part from the leader at their present gap is dropped too,
    unless it is the baseline: the tie is called now, and the rounds left go to the speed-up's precision alone.
    On the quickstart, two leaders 1-5% apart took a third of every round to the race's end (five live runs:
    26-30 rounds)."""
    if number < MIN_ROUNDS:
        return _Stop()
    now = standing(record["rounds"], record["anchor"], alive)
    stop = _Stop(dropped=now.losers())
    if now.decided(precision):
        stop.reason = "decided"
        return stop
    runner_up = now.runner_up()
    if runner_up is None:
        return stop
    needed = now.versus_leader[runner_up].rounds_to_separate(now.fit.df)
    hopeless = needed is None or needed > most
    precise = now.speedup is None or (now.speedup.half_width is not None and now.speedup.half_width <= precision)
    if not hopeless or (not precise and (runner_up == record["anchor"] or runner_up in stop.dropped)):
        return stop
    # Of the two, the race keeps the lighter (fewer ranks, then fewer DataLoader workers): the same speed on less
    entrants = record["entrants"]
    less = (runner_up != record["anchor"] and now.leader != record["anchor"]
            and lighter(entrants[runner_up]["config"], entrants[now.leader]["config"]))
    tied = now.leader if less else runner_up
    if precise:
        stop.reason = "a tie"
        if not less:
            return stop
    else:
        stop.dropped.append(tied)
    record.setdefault("tied", []).append(tied)  # the choice (choose_from_race) passes over it
    if less:
        stop.kept_for[tied] = f"#{entrants[runner_up]['trials'][0]}, which runs on less ({less})"
    return stop


def _why_dropped(key: str, record: dict[str, Any], stop: _Stop) -> str:
    if key in stop.kept_for:
        return f"tied beyond what the rounds left could part with {stop.kept_for[key]}"
    if key in record.get("tied", ()):
        return "tied with the leader beyond what the rounds left could part"
    return "slower than the leader beyond the noise"


def _progress(number: int, now: Any, runners: dict[str, Runner]) -> str:
    leader = runners[now.leader].group.trials[0]
    if now.speedup is None:
        return f"race round {number}: the baseline leads"
    width = now.speedup.half_width
    interval = f" ± {width:.0%}" if width is not None else ""
    return f"race round {number}: #{leader} leads, {now.speedup.ratio:.2f}x{interval} over the baseline"


@contextlib.contextmanager
def _closing(study: optuna.Study, spec: StudySpec, runners: dict[str, Runner], tell: Tell) -> Iterator[None]:
    """End every entrant's processes, then store each entrant's trial (its blocks as its windows) and the
    choice (``autotune_confirmation``); a race stopped by Ctrl-C or SIGTERM stores its trials as interrupted
    (retried on resume)."""
    try:
        yield
    except BaseException:
        for runner in runners.values():
            with contextlib.suppress(Exception):
                runner.entrant.close()
            tell_interrupted(study, runner.trial)
        raise
    for runner in runners.values():
        try:
            runner.end(float(spec.trial.max_seconds))
        except Exception as e:
            runner.entrant.close()
            runner.failed = runner.failed or f"did not finish: {e}"
    for runner in runners.values():
        result = entrant_result(runner)
        with contextlib.suppress(OSError):
            (runner.entrant.trial_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
        tell(runner.trial, result)
    race = study.user_attrs.get(RACE_ATTR)
    if isinstance(race, dict) and race.get("rounds"):
        record = confirmation_record(study, spec)
        record["separable"] = race.get("stopped") != "a tie"  # a tie: no affordable number of rounds parts them
        study.set_user_attr("autotune_confirmation", record)


def race_confirmation(
    study: optuna.Study,
    spec: StudySpec,
    run_trial: Callable[..., TrialResult],
    launcher: Launcher,
    *,
    enter: Enter,
    tell: Tell,
    observer: Observer,
    clock: Callable[[], float] = time.monotonic,
    deadline: float | None = None,
) -> bool:
    """Confirm the study by a race when it can (:func:`can_race`; a live launcher that paces its runs, or a
    replay whose runner offers ``paced``) and return True; False when the caller should confirm by re-runs.
    The live race's runs share one lease of the machine's cores: only one of them runs at a time."""
    if not can_race(spec):
        return False
    paced = getattr(run_trial, "paced", None)
    if paced is not None:
        return race(study, spec, paced, enter=enter, tell=tell, observer=observer, clock=clock, deadline=deadline)
    if run_trial is not live_run_trial or not launcher.paces:
        return False
    groups = measured_groups(study, spec)
    if len({tuple(sorted(dict(g.config).get("env", {}).items())) for g in groups}) > 1:
        return False  # a warm launcher forks each environment from its own zygote: one at a time
    baseline = _baseline_group(study, groups)
    if baseline is None:
        return False
    with launcher.sharing(plan_for(spec, TrialConfig.model_validate(baseline.config))):
        return race(study, spec, lambda plan, trial_dir: PacedRun(launcher, plan, trial_dir), enter=enter,
                    tell=tell, observer=observer, clock=clock, deadline=deadline, beat=heartbeats(study, clock))
