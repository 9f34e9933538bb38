"""The :class:`Calibration` a study's choice becomes: the chosen configuration with the helpers a training
script applies directly — DataLoader and DDP keyword arguments, an autocast context, a GradScaler,
activation checkpointing, sharding, the learning rate and the torchrun arguments.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.knobs import ddp_arguments
from autotune.search_space import BatchSplit, TrialConfig

if TYPE_CHECKING:
    from autotune.objectives import ScalePlan
    from autotune.scale import SyncGrowth

__all__ = ["Calibration"]


@dataclass(frozen=True)
class Calibration:
    """The configuration a study chose, and how to apply it.

    Attributes:
        config: the chosen knobs and derived values (``lr``, ``global_batch``).
        study: the Optuna study it came from.
        throughput_samples_s: median throughput of the chosen configuration over its measurements.
        spread: (max - min) / median of those measurements.
        speedup: chosen median over the baseline's median (None without a measured baseline).
        confirmed: whether the choice was confirmed (by a race or by re-runs).
        default_is_best: the chosen configuration is the baseline (the workload's defaults): nothing
            measured beat it by more than the measured spread.
        speedup_half_width: the speed-up's relative ~95% half-width (``speedup x (1 ± this)``; None: unknown).
        statement: how sure the choice is, ``best by X% (± Y%) over #N`` or ``tied within noise with ...``.
        advice: when a confirmation race left the two leaders tied, what more rounds would take (else None).
        spec: the study file it was read with (None in a rank, from :meth:`from_json`).
        global_batch_held: the study held the global batch (``constraints.global_batch``): every trial ran it,
            split differently (:attr:`split`), at the same learning rate.
    """

    config: TrialConfig
    study: Any
    throughput_samples_s: float | None = None
    spread: float | None = None
    peak_memory_mb: float | None = None
    loss: float | None = None
    speedup: float | None = None
    baseline_throughput_samples_s: float | None = None
    confirmed: bool = False
    default_is_best: bool = False
    speedup_half_width: float | None = None
    statement: str | None = None
    advice: str | None = None
    spec: Any = None  # the StudySpec the study was read with (None when rebuilt from JSON)
    global_batch_held: bool = False

    # -- the numbers ------------------------------------------------------------------------------------
    @property
    def lr(self) -> float:
        """The scaled learning rate: ``base_lr * f(global_batch / base_batch_size)``."""
        return self.config.lr

    @property
    def split(self) -> BatchSplit:
        """How the global batch is split: ``(batch_size, grad_accum, world_size)``; ``split.label`` is ``"64x2x2"``."""
        return BatchSplit(self.config.batch_size, self.config.grad_accum, self.config.world_size)

    @property
    def batch_size(self) -> int:
        """Per-rank micro-batch."""
        return self.config.batch_size

    @property
    def global_batch(self) -> int:
        return self.config.global_batch

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step; use ``model.no_sync()`` on all but the last."""
        return self.config.grad_accum

    @property
    def world_size(self) -> int:
        return self.config.world_size

    # -- hyperparameters (the study file's hyperparameters: section) -------------------------------------
    @property
    def hyperparameters(self) -> dict[str, Any]:
        """The chosen value of every hyperparameter, by its study-file name (``dropout``, ``base_lr``,
        ``optimizer.weight_decay``); empty when the study has none."""
        return dict(self.config.hyperparameters)

    def build_kwargs(self) -> dict[str, Any]:
        """The hyperparameters that are keyword arguments of the workload's ``build()`` (``base_lr`` too
        when chosen: pass it where your build() takes it; :attr:`lr` is already scaled from it)."""
        from autotune.spec import split_hyperparameters

        build, base_lr, _ = split_hyperparameters(self.config.hyperparameters)
        return {**build, **({"base_lr": base_lr} if base_lr is not None else {})}

    def optimizer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the optimizer factory (``optimizer.weight_decay`` -> ``weight_decay``), to
        pass beside ``lr=calibration.lr``."""
        from autotune.spec import split_hyperparameters

        return split_hyperparameters(self.config.hyperparameters)[2]

    # -- helpers ----------------------------------------------------------------------------------------
    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader`` (add your dataset and sampler)."""
        cfg = self.config
        kwargs: dict[str, Any] = {
            "batch_size": cfg.batch_size,
            "num_workers": cfg.num_workers,
            "pin_memory": cfg.pin_memory,
            "drop_last": True,
        }
        if cfg.num_workers > 0:
            kwargs["prefetch_factor"] = cfg.prefetch_factor
            kwargs["persistent_workers"] = True
        return kwargs

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DistributedDataParallel`` (add ``device_ids`` on CUDA); empty when the
        chosen ``sharding`` is fsdp (use :meth:`apply_sharding` instead of DDP)."""
        if self.config.sharding != "ddp":
            return {}
        return ddp_arguments(self.config)  # as the trials' ranks passed them

    def apply_compile(self, model: Any) -> Any:
        """``model.compile(mode=...)`` in place when ``compile`` was chosen (before DDP/FSDP wrap it, as the
        trials did); returns the model."""
        if self.config.compile != "off":
            model.compile(mode=self.config.compile)
        return model

    def apply_sharding(self, model: Any, module_types: Iterable[type] = ()) -> Any:
        """With ``sharding: fsdp``/``fsdp_no_reshard``: FSDP2 ``fully_shard`` on every module of
        ``module_types`` (the workload's shard_modules), then the root, amp as its MixedPrecisionPolicy —
        as the trials did; call it after the process group is initialised. With ``ddp``: the model as is
        (wrap it in DDP with :meth:`ddp_kwargs`)."""
        if self.config.sharding == "ddp":
            return model
        import torch

        from autotune.trial_runner import shard_model

        device = torch.device(self.config.device)
        shard_model(model, tuple(module_types), self.config, device)
        return model

    def env(self) -> dict[str, str]:
        """The environment the trials ran with: the study's ``env:`` values and, for a ``threads_per_rank``
        number, OMP_NUM_THREADS/MKL_NUM_THREADS. Set it before the ranks start (torchrun's environment)."""
        out = dict(self.config.env)
        if isinstance(self.config.threads_per_rank, int):
            out["OMP_NUM_THREADS"] = out["MKL_NUM_THREADS"] = str(self.config.threads_per_rank)
        return out

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast context of the chosen AMP mode (a no-op context when AMP is off)."""
        if self.config.amp == "off":
            return contextlib.nullcontext()
        import torch

        dtype = torch.bfloat16 if self.config.amp == "bf16" else torch.float16
        return torch.autocast(self.config.device, dtype=dtype)

    def grad_scaler(self) -> Any:
        """A ``torch.amp.GradScaler`` for fp16, else None."""
        if self.config.amp != "fp16":
            return None
        import torch

        return torch.amp.GradScaler("cuda")

    def apply_activation_checkpointing(self, model: Any, module_types: Iterable[type]) -> Any:
        """Wrap every module of ``module_types`` in ``model`` for activation checkpointing (when chosen)."""
        if not self.config.activation_checkpointing:
            return model
        from autotune.trial_runner import apply_checkpointing

        apply_checkpointing(model, tuple(module_types))  # as the trials applied it
        return model

    def torch_threads(self, local_world_size: int | None = None) -> int:
        """Intra-op threads per rank, as the trials resolved them: the ``threads_per_rank`` number, or its word
        (:meth:`threads_rule`) against this machine's cores shared by ``local_world_size`` ranks (the ranks
        your launcher starts on each machine; default :attr:`world_size`, all on one machine). Call it where
        the ranks run: the share is this process's cores."""
        from autotune.trial_runner import resolve_threads

        local = self.config.world_size if local_world_size is None else local_world_size
        return resolve_threads(self.config.threads_per_rank, local, self.config.num_workers)

    def threads_rule(self) -> str:
        """The chosen ``threads_per_rank`` in words: ``"2 threads per rank"`` for a number, else its word and
        rule (``"half: half the rank's share of the cores, at least 1 (the share: cores // ranks on the machine)"``)."""
        from autotune.trial_runner import THREAD_WORDS

        setting = self.config.threads_per_rank
        if isinstance(setting, int):
            return f"{setting} thread{'s' if setting != 1 else ''} per rank"
        return f"{setting}: {THREAD_WORDS[setting]}, at least 1 (the share: cores // ranks on the machine)"

    def torchrun_args(self) -> list[str]:
        """Arguments for torchrun on one machine: ``["--nproc-per-node=W"]``."""
        return [f"--nproc-per-node={self.config.world_size}"]

    def to_hf_training_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.TrainingArguments``: per-device batch, gradient accumulation,
        learning rate, DataLoader workers/prefetch/pin memory, bf16/fp16, gradient checkpointing,
        ``ddp_bucket_cap_mb``, compile and FSDP. Add ``output_dir`` and the rest of yours; start the script
        with ``torchrun`` and :meth:`torchrun_args` for the chosen ranks. Needs ``autotune[hf]`` to use."""
        from autotune.calibration._integrations import hf_training_arguments

        return hf_training_arguments(self.config)

    def to_lightning(self) -> dict[str, Any]:
        """``{"trainer": ..., "dataloader": ..., "lr": ...}``: keyword arguments of ``lightning.Trainer``
        (precision, accumulate_grad_batches, devices, accelerator, strategy — a ``DDPStrategy`` with the
        chosen bucket size for several ranks), of your ``DataLoader``, and the learning rate for
        ``configure_optimizers``. Activation checkpointing: :meth:`apply_activation_checkpointing` in
        ``configure_model``. Needs ``autotune[lightning]`` for several ranks."""
        from autotune.calibration._integrations import lightning_kwargs

        return lightning_kwargs(self.config, self.dataloader_kwargs())

    def to_json(self) -> str:
        """The configuration as JSON (for passing to ranks, e.g. through an environment variable)."""
        return self.config.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        """Rebuild a Calibration from :meth:`to_json` (in a rank: the helpers work, ``study`` is None)."""
        return cls(config=TrialConfig.model_validate_json(text), study=None)

    def plan(self, *, nodes: int, ranks_per_node: int, top: int = 3, growth: SyncGrowth | None = None) -> ScalePlan:
        """The study's best configurations predicted at ``nodes x ranks_per_node`` (``autotune plan``): each
        option's configuration, predicted samples/s with a 90% interval (and goodput once the trials carry
        a gradient noise scale), and how far past the measured scales it reaches. Raises
        :class:`~autotune.errors.UsageError` naming what is needed when the trials have too few distinct
        scales to fit. ``growth``: the cluster's network profile (:class:`autotune.scale.SyncGrowth`), how the
        sync across nodes grows past 2 nodes (``autotune plan --sync-growth``); none: it does not."""
        from autotune.errors import UsageError
        from autotune.objectives import study_scale_plan

        if self.study is None or self.spec is None:
            raise UsageError(
                "this Calibration has no study to plan from (rebuilt from JSON); "
                "use autotune.load_calibration(STUDY_FILE).plan(...)"
            )
        return study_scale_plan(self.study, self.spec, nodes=nodes, ranks_per_node=ranks_per_node, top=top,
                                growth=growth)

    def summary(self) -> str:
        half = self.speedup_half_width
        width = f" (± {self.speedup * half:.2f}x)" if self.speedup and half else ""
        speed = f", {self.speedup:.2f}x the baseline{width}" if self.speedup else ""
        if self.default_is_best:
            speed = ", the default configuration: nothing beat it"
        through = f"{self.throughput_samples_s:,.0f} samples/s" if self.throughput_samples_s else "unmeasured"
        noise = f"; {self.statement}" if self.statement else ""
        held = ""
        if self.global_batch_held:
            held = (f"; global batch {self.config.global_batch} held, split {self.split.label} "
                    "(batch_size x grad_accum x world_size)")
        return f"{self.config.short()} ({through}{speed}{noise}{held})"
