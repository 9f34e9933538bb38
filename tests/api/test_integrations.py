"""Calibration.to_hf_training_arguments() and to_lightning(): each builds the real object of its library.

The libraries are imported by the tests that use them (fixtures), not when the suite collects this file: each
pytest-xdist worker collects every file, and lightning and transformers take ~3 CPU-s to import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune import Calibration
from autotune.calibration import HF_TRAINING_ARGUMENTS
from autotune.search_space import TrialConfig


@pytest.fixture
def transformers() -> Any:
    return pytest.importorskip("transformers")


@pytest.fixture
def lightning() -> Any:
    return pytest.importorskip("lightning")


def _calibration(**knobs: object) -> Calibration:
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=32, **{"batch_size": 16, **knobs})  # type: ignore[arg-type]
    return Calibration(config=config, study=None)


CASES = {
    "defaults": {},
    "workers_bf16_accum_ckpt": {"num_workers": 2, "prefetch_factor": 4, "amp": "bf16", "grad_accum": 4,
                                "activation_checkpointing": True, "lr_scaling": "linear", "bucket_cap_mb": 5},
    "two_ranks": {"world_size": 2, "bucket_cap_mb": 100},
}


@pytest.mark.parametrize("knobs", list(CASES.values()), ids=list(CASES))
def test_hf_training_arguments_build_and_carry_every_knob(
    tmp_path: Path, knobs: dict[str, object], transformers: Any
) -> None:
    cal = _calibration(**knobs)
    kwargs = cal.to_hf_training_arguments()
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], **kwargs)
    cfg = cal.config
    assert args.per_device_train_batch_size == cfg.batch_size
    assert args.gradient_accumulation_steps == cfg.grad_accum
    assert args.learning_rate == pytest.approx(cfg.lr)
    assert args.dataloader_num_workers == cfg.num_workers
    assert args.dataloader_prefetch_factor == (cfg.prefetch_factor if cfg.num_workers else None)
    assert args.dataloader_persistent_workers == (cfg.num_workers > 0)
    assert args.dataloader_pin_memory == cfg.pin_memory
    assert args.bf16 == (cfg.amp == "bf16") and args.fp16 is False
    on = getattr(args, "activation_checkpointing", None) or args.gradient_checkpointing  # renamed in transformers 5
    assert bool(on) == cfg.activation_checkpointing
    assert args.ddp_bucket_cap_mb == cfg.bucket_cap_mb
    assert args.use_cpu is True
    # The learning rate is the scaled one: linear at 4 x 16 = 64 = 2x the base batch doubles it.
    if knobs.get("lr_scaling") == "linear":
        assert args.learning_rate == pytest.approx(2e-3)


def test_every_hf_keyword_is_a_training_arguments_field(transformers: Any) -> None:
    import dataclasses

    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert {name for name, _ in HF_TRAINING_ARGUMENTS} <= fields
    assert set(_calibration(activation_checkpointing=True, num_workers=1).to_hf_training_arguments()) <= fields


@pytest.mark.parametrize("knobs", list(CASES.values()), ids=list(CASES))
def test_lightning_trainer_and_dataloader_build(tmp_path: Path, knobs: dict[str, object], lightning: Any) -> None:
    cal = _calibration(**knobs)
    out = cal.to_lightning()
    trainer = lightning.Trainer(**out["trainer"], default_root_dir=str(tmp_path), logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, max_steps=1)
    cfg = cal.config
    assert trainer.accumulate_grad_batches == cfg.grad_accum
    assert trainer.precision == {"off": "32-true", "bf16": "bf16-mixed"}[cfg.amp]
    assert trainer.num_devices == cfg.world_size
    if cfg.world_size > 1:
        from lightning.pytorch.strategies import DDPStrategy

        assert isinstance(trainer.strategy, DDPStrategy)
        assert trainer.strategy._ddp_kwargs["bucket_cap_mb"] == cfg.bucket_cap_mb
    loader = DataLoader(TensorDataset(torch.randn(64, 3)), **out["dataloader"])
    assert loader.batch_size == cfg.batch_size and loader.num_workers == cfg.num_workers
    assert out["lr"] == pytest.approx(cfg.lr)


def test_lightning_fits_one_step_with_the_calibration(tmp_path: Path, lightning: Any) -> None:
    """Not only constructed: a Lightning Trainer built from the kwargs trains (bf16, accumulation)."""
    cal = _calibration(amp="bf16", grad_accum=2, batch_size=8)
    out = cal.to_lightning()

    class Net(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            (x,) = batch
            return self.fc(x).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=out["lr"])

    trainer = lightning.Trainer(**out["trainer"], default_root_dir=str(tmp_path), logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                max_steps=2)
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(64, 3)), **out["dataloader"]))
    assert trainer.global_step == 2


@pytest.mark.slow
def test_the_hf_example_tunes_and_its_calibration_trains_with_the_hf_trainer(
    tmp_path: Path, transformers: Any, lightning: Any
) -> None:
    """studies/hf_gpt2: calibrate() on a real GPT2LMHeadModel, then a transformers Trainer and a Lightning
    Trainer built from the calibration (the Trainer runs two steps)."""
    import shutil
    import sys

    import autotune

    root = Path(__file__).resolve().parent.parent.parent / "studies"
    shutil.copy(root / "hf_gpt2.py", tmp_path / "hf_gpt2.py")
    shutil.copy(root / "hf_gpt2.yaml", tmp_path / "hf_gpt2.yaml")
    cal = autotune.calibrate(
        tmp_path / "hf_gpt2.yaml", n_trials=2,
        trial__max_steps=6, trial__warmup_steps=2, confirm__top_k=0,
        search_space__batch_size={"choices": [8, 16]}, search_space__world_size=1,
        workload__args={"n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 32, "samples": 256},
    )
    assert cal.throughput_samples_s and cal.throughput_samples_s > 0
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], max_steps=2,
                                          save_strategy="no", **cal.to_hf_training_arguments())
    assert args.per_device_train_batch_size == cal.batch_size
    sys.path.insert(0, str(tmp_path))
    try:
        import hf_gpt2  # the example's own workload file

        workload = hf_gpt2.build(n_layer=1, n_embd=32, n_head=2, seq_len=32, samples=256)
    finally:
        sys.path.remove(str(tmp_path))
    trainer = transformers.Trainer(model=workload.model(), args=args, train_dataset=workload.dataset(),
                                   data_collator=workload.collate_fn)
    trainer.train()
    assert trainer.state.global_step == 2
    lightning.Trainer(**cal.to_lightning()["trainer"], logger=False, enable_checkpointing=False,
                      default_root_dir=str(tmp_path))
