"""The study's launcher, prepared before torch and the workload are imported (`autotune run`'s start)."""

from __future__ import annotations

from autotune.errors import UsageError
from autotune.search_space import HyperparameterSpace, SearchSpace
from autotune.spec import StudySpec
from autotune.trial_runner._base import Launcher
from autotune.trial_runner._factory import make_launcher
from autotune.trial_runner._plan import plan_for


def prepared_launcher(spec: StudySpec) -> Launcher:
    """The study's launcher, already preparing its first launch (:meth:`Launcher.prepare`: the warm launcher's
    zygote starts importing torch) from what the study file alone says, before the workload is imported.

    `autotune run` calls this first, before it imports torch (this module and the launchers' need none: the
    names of ``autotune.trial_runner`` that do are imported on first use) and before it imports and checks the
    workload (the command reaches its tuner after 1.5 s for the quickstart's MLP, 4.1 s for
    studies/hf_gpt2.yaml's GPT-2, here: benchmarks/startup.json), so that and the zygote's own imports overlap
    instead of following each other; it hands the launcher to the Tuner and closes it. The zygote's environment
    depends only on the baseline's world size, threads per rank and ``env:`` values and the study's folder,
    none of which needs the workload, so the space is built with a stand-in learning rate and batch (they
    change no launch environment); the Tuner prepares the launcher again with the baseline's full plan, which
    is the same zygote. A study file this cannot read without its workload (a baseline of hyperparameters)
    or whose baseline the space refuses is prepared by the Tuner, as without this (which reports the error)."""
    launcher = make_launcher(spec)
    if spec.hyperparameters:
        return launcher
    try:
        space = SearchSpace.build(spec.search_space, base_lr=1.0, base_batch_size=1,
                                  device=spec.resolved_device(), env=spec.env, hyper=HyperparameterSpace())
        plan = plan_for(spec, space.default_config(spec.baseline))
    except (ValueError, UsageError):  # a baseline the space refuses: the Tuner says so, with the workload's numbers
        return launcher
    launcher.prepare(plan)
    return launcher
