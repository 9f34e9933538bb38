"""When a compiled configuration's compile time is won back: pure arithmetic over stored trials."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.objectives._config_key import config_key


@dataclass(frozen=True)
class CompilePayback:
    """A compiled trial against an uncompiled one: ``compile_s`` is won back after ``steps`` optimizer
    steps (``minutes`` of training at the compiled speed); ``steps`` is None when compiling is no faster."""

    trial: int
    compile_s: float
    against_trial: int
    same_config: bool  # the uncompiled trial differs only in compile (else: the best uncompiled one)
    step_s: float  # the compiled configuration's seconds per optimizer step
    against_step_s: float
    steps: int | None
    minutes: float | None

    def describe(self) -> str:
        what = "the same configuration uncompiled" if self.same_config else "the best uncompiled configuration"
        if self.steps is None:
            return (f"compile ({self.compile_s:.1f} s) is never won back: the compiled trial #{self.trial} is not "
                    f"faster than {what} (#{self.against_trial})")
        return (f"compile ({self.compile_s:.1f} s) is won back after {self.steps:,} steps "
                f"({self.minutes:.1f} min) of training against {what} (trial #{self.against_trial})")


def compile_payback(trial: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> CompilePayback | None:
    """``trial`` and ``others`` are ``{"number", "config" (TrialConfig JSON), "throughput_samples_s",
    "compile_s"}`` of complete trials. None when ``trial`` is not compiled or nothing uncompiled was measured."""
    config = trial.get("config") or {}
    compile_s, throughput = trial.get("compile_s"), trial.get("throughput_samples_s")
    if config.get("compile", "off") == "off" or not compile_s or not throughput:
        return None
    twin_key = config_key({**config, "compile": "off"})
    uncompiled = [o for o in others if (o.get("config") or {}).get("compile", "off") == "off"
                  and o.get("throughput_samples_s")]
    twins = [o for o in uncompiled if config_key(o["config"]) == twin_key]
    pool = twins or uncompiled
    if not pool:
        return None
    against = max(pool, key=lambda o: float(o["throughput_samples_s"]))
    batch = float(config["global_batch"])
    step_s = batch / float(throughput)
    against_step_s = float(against["config"]["global_batch"]) / float(against["throughput_samples_s"])
    # per sample, so configurations of different global batches compare at equal samples trained
    gain_per_sample = against_step_s / float(against["config"]["global_batch"]) - step_s / batch
    steps = minutes = None
    if gain_per_sample > 0:
        samples = float(compile_s) / gain_per_sample
        steps = max(1, round(samples / batch))
        minutes = steps * step_s / 60
    return CompilePayback(
        trial=int(trial["number"]), compile_s=float(compile_s), against_trial=int(against["number"]),
        same_config=bool(twins), step_s=step_s, against_step_s=against_step_s, steps=steps, minutes=minutes,
    )


def complete_trials(study: Any) -> list[dict[str, Any]]:
    """The complete trials of an Optuna study in the shape :func:`compile_payback` reads."""
    from optuna.trial import TrialState

    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        a = t.user_attrs
        if a.get("outcome") == "complete" and "config" in a:
            out.append({
                "number": t.number, "config": a["config"], "throughput_samples_s": a.get("throughput_samples_s"),
                "compile_s": a.get("compile_s"), "threads_per_rank": a.get("threads_per_rank"),
            })
    return out
