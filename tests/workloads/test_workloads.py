"""The built-in reference workloads: loadable by entrypoint, deterministic data, trainable models."""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader

from autotune import Workload, WorkloadError
from autotune.workload import load_workload

# Tiny configurations: each loads and trains in well under a second per step on one CPU core.
TINY: dict[str, dict[str, Any]] = {
    "mlp": {"hidden": 64, "depth": 2, "input_dim": 16, "samples": 512, "transform_cost": 2, "seed": 3},
    "convnet": {"width": 8, "depth": 2, "image_size": 16, "samples": 256, "num_classes": 4, "seed": 3},
    "lm": {"d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 32, "max_bytes": 60_000, "seed": 3},
    "gpt": {"vocab": 32, "dim": 32, "heads": 2, "layers": 2, "seq": 32, "samples": 512, "seed": 3},
}
NAMES = sorted(TINY)


def load(name: str, **overrides: Any) -> Workload:
    return load_workload(f"autotune.workloads.{name}:build", {**TINY[name], **overrides})


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def batches(workload: Workload, batch_size: int, n: int) -> list[Any]:
    loader = DataLoader(workload.dataset(), batch_size=batch_size, shuffle=False, collate_fn=workload.collate_fn)
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            return out
    raise AssertionError(f"dataset gave only {len(out)} batches of {batch_size}")


@pytest.mark.parametrize("name", NAMES)
def test_dataset_is_deterministic_and_sized(name: str) -> None:
    workload = load(name)
    first, second = workload.dataset(), workload.dataset()
    if name == "lm":
        assert len(first) == (TINY["lm"]["max_bytes"] - 1) // TINY["lm"]["seq_len"]
    else:
        assert len(first) == TINY[name]["samples"]
    for index in (0, 1, len(first) - 1):
        assert same(first[index], first[index])
        assert same(first[index], second[index])
    assert not same(first[0], first[1])
    with pytest.raises(IndexError):
        first[len(first)]
    # Another seed gives other data (the LM's text is fixed; only its weights follow the seed).
    if name != "lm":
        assert not same(load(name, seed=4).dataset()[0], first[0])


@pytest.mark.parametrize("name", NAMES)
def test_items_are_tensors_collated_by_default(name: str) -> None:
    workload = load(name)
    assert workload.collate_fn is None
    x, y = batches(workload, 4, 1)[0]
    assert x.shape[0] == y.shape[0] == 4
    if name == "mlp":
        assert x.dtype == y.dtype == torch.float32
        assert x.shape == (4, TINY["mlp"]["input_dim"])
    elif name == "convnet":
        assert x.shape == (4, 3, 16, 16) and x.dtype == torch.float32
        assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) < 4
    else:
        assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
        assert torch.equal(x[:, 1:], y[:, :-1])  # the target is the input shifted by one byte


@pytest.mark.parametrize("name", NAMES)
def test_dataset_pickles_and_loads_in_worker_processes(name: str) -> None:
    workload = load(name)
    dataset = workload.dataset()
    clone = pickle.loads(pickle.dumps(dataset))
    assert same(clone[5], dataset[5])
    pickle.dumps(workload)  # factories and loss are module-level: a spawn start method could ship them

    serial = list(DataLoader(dataset, batch_size=8, num_workers=0))
    parallel = list(DataLoader(dataset, batch_size=8, num_workers=2, prefetch_factor=2))
    assert len(parallel) == len(serial) > 1
    assert all(same(a, b) for a, b in zip(serial, parallel, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_forward_backward_gives_finite_scalar_loss(name: str) -> None:
    workload = load(name)
    model = workload.model()
    loss = workload.loss(model, batches(workload, 8, 1)[0])
    assert loss.dim() == 0 and loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(float(g.abs().sum()) > 0 for g in grads if g is not None)


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_forward_works(name: str) -> None:
    workload = load(name)
    model = workload.model()
    batch = batches(workload, 8, 1)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(batch[0]).dtype == torch.bfloat16  # autocast really runs the model in bf16
        loss = workload.loss(model, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()


@pytest.mark.parametrize("name", NAMES)
def test_model_contains_its_checkpoint_modules(name: str) -> None:
    workload = load(name)
    assert workload.checkpoint_modules
    model = workload.model()
    blocks = TINY[name]["n_layers" if name == "lm" else "layers" if name == "gpt" else "depth"]
    for kind in workload.checkpoint_modules:
        assert sum(isinstance(m, kind) for m in model.modules()) == blocks


@pytest.mark.parametrize("name", NAMES)
def test_checkpointed_blocks_give_the_same_gradients(name: str) -> None:
    workload = load(name)
    batch = batches(workload, 8, 1)[0]

    def grads(model: torch.nn.Module) -> list[torch.Tensor]:
        workload.loss(model, batch).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain = grads(workload.model())
    model = workload.model()  # the same initial weights: the seed fixes them
    for module in model.modules():
        if isinstance(module, workload.checkpoint_modules):
            module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    recomputed = grads(model)
    assert len(plain) == len(recomputed)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, recomputed, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_model_factory_is_seeded_without_touching_the_global_rng(name: str) -> None:
    workload = load(name)
    state = torch.get_rng_state()
    a, b = workload.model(), workload.model()
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    c = load(name, seed=4).model()
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters(), strict=True))


@pytest.mark.parametrize(("name", "steps", "batch_size"),
                         [("mlp", 40, 32), ("lm", 40, 16), ("convnet", 60, 32), ("gpt", 40, 16)])
def test_adamw_at_base_lr_lowers_the_loss(name: str, steps: int, batch_size: int) -> None:
    workload = load(name, samples=2048) if name != "lm" else load(name)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters(), workload.base_lr)
    losses = []
    for batch in batches(workload, batch_size, steps):
        loss = workload.loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    start, end = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert end < 0.75 * start, f"loss went from {start:.3f} to {end:.3f} in {steps} steps"


def test_mlp_transform_cost_changes_the_work_not_the_shapes() -> None:
    cheap, costly = load("mlp", transform_cost=0).dataset(), load("mlp", transform_cost=6).dataset()
    assert cheap[0][0].shape == costly[0][0].shape
    assert not same(cheap[0], costly[0])
    x = costly[0][0]
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std(unbiased=False)) - 1) < 1e-3  # re-normalised


def test_lm_text_comes_from_the_stdlib_sources() -> None:
    dataset = load("lm").dataset()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert dataset.paths, "no file was read"
    for path in dataset.paths:
        assert path.suffix == ".py" and path.resolve().is_relative_to(stdlib)
        assert "site-packages" not in path.parts
    assert dataset.paths[0] == sorted(stdlib.glob("*.py"))[0]  # a fixed order: sorted top-level modules first
    corpus = b"\n".join(path.read_bytes() for path in dataset.paths)
    first = dataset.paths[0].read_bytes()
    x, y = dataset[0]
    assert bytes(x.tolist()) == first[:32]
    for index in (1, len(dataset) // 2, len(dataset) - 1):
        x, y = dataset[index]
        assert bytes(x.tolist()) + bytes(y[-1:].tolist()) in corpus
    held_out = load("lm").eval_dataset
    assert held_out is not None
    assert bytes(held_out()[0][0].tolist()) == corpus[TINY["lm"]["max_bytes"] :][:32]  # the text after training's


@pytest.mark.parametrize(
    ("name", "args", "named"),
    [
        ("mlp", {"hidden": 0}, "hidden"),
        ("mlp", {"transform_cost": -1}, "transform_cost"),
        ("convnet", {"width": 2.5}, "width"),
        ("lm", {"d_model": 30, "n_heads": 4}, "n_heads"),
        ("lm", {"seq_len": 128, "max_bytes": 100}, "max_bytes"),
        ("gpt", {"dim": 30, "heads": 4}, "heads"),
        ("gpt", {"layers": 0}, "layers"),
    ],
)
def test_bad_size_arguments_are_one_line_workload_errors(name: str, args: dict[str, Any], named: str) -> None:
    with pytest.raises(WorkloadError, match=named):
        load_workload(f"autotune.workloads.{name}:build", args)
    with pytest.raises(WorkloadError, match="build\\(\\) takes no argument 'no_such_size'; its parameters: "):
        load_workload(f"autotune.workloads.{name}:build", {"no_such_size": 1})


def test_every_workload_builds_with_its_defaults() -> None:
    for name in NAMES:
        workload = load_workload(f"autotune.workloads.{name}:build")
        assert workload.base_batch_size >= 16 and workload.eval_dataset is not None


@pytest.mark.slow
def test_importing_the_package_imports_no_workload() -> None:
    code = (
        "import sys, autotune.workloads; "
        "loaded = [m for m in sys.modules if m.startswith('autotune.workloads.')]; "
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
