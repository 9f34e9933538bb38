"""The gradient noise scale inside a rank: two batch sizes' squared gradient norms, read off gradients the step
computes anyway (the estimator: autotune.scale's ``estimate_noise_scale``).

- DDP at two ranks or more (``ddp``): the comm hook reads each bucket's norm before its all-reduce (this
  rank's gradient, ``batch_size x grad_accum`` samples) and after it (the global batch's; every rank holds the
  same all-reduced bucket, so each reads only the buckets whose index it owns, index mod world size: the
  ranks' parts add up to the whole norm). About 1 + 1/world_size norms a bucket a rank; no collective of its
  own: the window's existing reduction carries the sums.
- One rank with grad_accum >= 2 (``grad_accum``): a hook on every parameter reads each micro-batch's gradient
  as autograd hands it over (``batch_size`` samples), and the accumulated gradient is read once before the
  optimizer step (the global batch). One norm per parameter per micro-batch.
- FSDP (its reduce-scatter runs inside its own hooks), or one rank without accumulation: no second batch size
  in the step, so not measured (no value).

Norms are summed on the device and read at the window's end, when the window's reduction synchronises anyway.
Under fp16's GradScaler the norms are divided by the scale squared, and a step whose gradients are not finite
(skipped by the scaler) is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from autotune.scale import NOISE_INTERVAL, NoiseWindow, estimate_noise_scale
from autotune.search_space import TrialConfig
from autotune.trial_result import GradientNoise, NoiseScale, Window

SOURCES = ("ddp", "grad_accum")


def noise_source(config: TrialConfig) -> tuple[str | None, str]:
    """Where a configuration's noise scale comes from (``ddp``, ``grad_accum``), or None and why not."""
    if config.tensor_parallel > 1 or config.pipeline_parallel > 1:
        return None, "not measured under tensor or pipeline parallelism"
    if config.sharding != "ddp":
        return None, f"not measured under {config.sharding} (its reduce-scatter runs inside FSDP's own hooks)"
    if config.world_size >= 2:
        return "ddp", "per-rank gradients against the all-reduced one"
    if config.grad_accum >= 2:
        return "grad_accum", "micro-batches' gradients against the accumulated one"
    return None, "not measured at one rank without grad_accum (one batch size only)"


def _sqr(grad: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(grad.detach(), dtype=torch.float32).double().square()


class NoiseMeter:
    """One rank's squared gradient norms at the small and the big batch, summed over a window's steps."""

    def __init__(self, config: TrialConfig, source: str, device: torch.device, rank: int = 0) -> None:
        self.source, self.rank, self.world_size = source, rank, config.world_size
        local = config.batch_size * config.grad_accum
        self.batch_small = local if source == "ddp" else config.batch_size
        self.batch_big = config.global_batch
        # grad_accum: each micro-batch's gradient reaches its hook divided by grad_accum (the loss is), so the
        # micro-batches' mean |g|^2 is grad_accum x the sum of what the hooks read.
        small_factor = float(config.grad_accum) if source == "grad_accum" else 1.0
        self._factors = torch.tensor([small_factor, 1.0], dtype=torch.float64, device=device)
        self._step = torch.zeros(2, dtype=torch.float64, device=device)
        self._window = torch.zeros(3, dtype=torch.float64, device=device)  # sums: small, big, steps

    def add_small(self, grad: torch.Tensor) -> None:
        self._step[0] += _sqr(grad)

    def add_big(self, grad: torch.Tensor) -> None:
        self._step[1] += _sqr(grad)

    def owns(self, bucket_index: int) -> bool:
        """Whether this rank reads the all-reduced norm of the bucket (each rank a share of the buckets)."""
        return bucket_index % self.world_size == self.rank

    def watch_parameters(self, module: torch.nn.Module) -> None:
        """grad_accum: every micro-batch's gradient of each parameter, as autograd hands it over."""
        for p in module.parameters():
            if p.requires_grad:
                p.register_hook(self._micro)

    def _micro(self, grad: torch.Tensor) -> None:
        self.add_small(grad)

    def end_step(self, parameters: Sequence[torch.nn.Parameter], scale: float | None) -> None:
        """The step's gradients are complete (before the optimizer step): add its norms to the window."""
        if self.source == "grad_accum":
            for p in parameters:
                if p.grad is not None:
                    self.add_big(p.grad)
        values = self._step * self._factors  # made once: no tensor built (nor a host-to-device copy) every step
        if scale is not None:
            values = values / (scale * scale)
        ok = torch.isfinite(values).all()
        self._window[:2] += torch.where(ok, values, torch.zeros_like(values))
        self._window[2] += ok.double()
        self._step.zero_()

    def take(self) -> list[float]:
        """The window's sums ``[|g_small|^2, |g_big|^2, steps]`` (read from the device), and start anew."""
        sums = self._window.tolist()
        self._window.zero_()
        return [float(x) for x in sums]


def window_noise(meter: NoiseMeter | None, rows: Sequence[Sequence[float]]) -> GradientNoise | None:
    """A window's record of the ranks' sums (each row's last three values): the means over steps (and over the
    ranks for ``|g_small|^2``; the ranks' parts of ``|g_big|^2`` add up)."""
    if meter is None:
        return None
    steps = sum(r[-1] for r in rows)
    if steps <= 0:
        return None
    per_rank = steps / len(rows)
    return GradientNoise(
        batch_small=meter.batch_small, batch_big=meter.batch_big, steps=round(per_rank),
        sqr_small=sum(r[-3] for r in rows) / steps, sqr_big=sum(r[-2] for r in rows) / per_rank,
    )


def trial_noise_scale(windows: Sequence[Window], source: str | None) -> NoiseScale | None:
    """A trial's noise scale from its measured windows' records (None: none carries one)."""
    readings = [w.gradient_noise for w in windows if w.gradient_noise is not None]
    if not readings or source is None:
        return None
    first = readings[0]
    same = [r for r in readings if (r.batch_small, r.batch_big) == (first.batch_small, first.batch_big)]
    estimate = estimate_noise_scale(
        first.batch_small, first.batch_big, [NoiseWindow(r.steps, r.sqr_small, r.sqr_big) for r in same]
    )
    if estimate is None:
        return None
    return NoiseScale(
        value=_round(estimate.value), low=_round(estimate.low), high=_round(estimate.high),
        batch_small=estimate.batch_small, batch_big=estimate.batch_big, steps=estimate.steps,
        windows=estimate.windows, source=source, interval=NOISE_INTERVAL,
    )


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")
