"""`autotune validate` builds the workload and runs its loss once: each mistake is one line, exit 2, no rank.

The broken workloads are the mistakes a new user makes (issue 14): a module or a dataset instance where a
factory is expected, a loss returning a ModelOutput, a tuple or an unreduced tensor, a checkpoint type the
model does not contain, samples the default collate cannot stack, a typo in an argument.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.workload_check import check_workload, load_spec, native_bf16, study_warnings

GOOD = """\
import torch
from torch import nn

import autotune


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.fc(x)


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(4, generator=g), "y": torch.randn(1, generator=g)}


class PointStream(torch.utils.data.IterableDataset):
    def __init__(self, n=64):
        self.n = n

    def __iter__(self):
        points = Points()
        return (points[i] for i in range(self.n))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4, 1)

    def forward(self, x, y):
        out = self.head(self.blocks(x))
        return {"loss": nn.functional.mse_loss(out, y), "out": out}


def loss(model, batch):
    return model(**batch)["loss"]


def build(width=4):
    return autotune.Workload(model=MODEL, dataset=DATASET, loss=LOSS, checkpoint_modules=(CKPT,), base_batch_size=8)
"""
DEFAULTS = {"MODEL": "Net", "DATASET": "Points", "LOSS": "loss", "CKPT": "Block"}

BROKEN = {
    "module_instance": ({"MODEL": "Net()"}, "Workload.model is a Net instance, not a factory"),
    "dataset_instance": ({"DATASET": "Points()"}, "Workload.dataset is a Points instance, not a factory"),
    "mapping_loss": ({"LOSS": "lambda m, b: m(**b)"}, "returned a dict, not a scalar tensor; return its ['loss']"),
    "tuple_loss": ({"LOSS": "lambda m, b: (m(**b)['loss'], 1)"}, "returned a tuple, not a scalar tensor; "
                                                                  "return its first element ([0])"),
    "unreduced_loss": ({"LOSS": "lambda m, b: (m(**b)['out'] - b['y']) ** 2"},
                       "returned a tensor of shape (2, 1), not a scalar; reduce it"),
    "float_loss": ({"LOSS": "lambda m, b: m(**b)['loss'].item()"}, "returned a Python float, not a tensor"),
    "detached_loss": ({"LOSS": "lambda m, b: m(**b)['loss'].detach()"}, "backward() on the loss failed"),
    "missing_checkpoint_type": ({"CKPT": "nn.LSTM"},
                                "checkpoint_modules: the model contains no LSTM module; name the block type it "
                                "does contain (repeated blocks in this model: Block (2)"),
    "ragged_samples": ({"DATASET": "lambda: [torch.zeros(i + 1) for i in range(8)]"},
                       "the DataLoader's default collate cannot stack 2 samples"),
    "loss_raises": ({"LOSS": "lambda m, b: m(b)"}, "Workload.loss(model, batch) raised TypeError"),
    "empty_stream": ({"DATASET": "lambda: PointStream(0)"}, "the stream is empty; Workload.dataset() must yield"),
    "stream_raises": ({"DATASET": "lambda: PointStream('x')"}, "reading the stream raised TypeError"),
    "neither": ({"DATASET": "lambda: 3"}, "returned int, neither a map-style dataset nor a stream"),
}


def write(folder: Path, args: str = "", **changes: str) -> Path:
    text = GOOD
    for name, value in {**DEFAULTS, **changes}.items():
        text = text.replace(name if name != "LOSS" else "LOSS,", value if name != "LOSS" else value + ",")
    (folder / "wl.py").write_text(text)
    study = folder / "study.yaml"
    study.write_text(f"name: check\nworkload: {{entrypoint: wl.py:build{args}}}\n"
                     "trial: {warmup_steps: 1, max_steps: 4}\n")
    return study


def test_a_good_workload_is_built_and_its_loss_run(tmp_path: Path) -> None:
    study = write(tmp_path)
    report = check_workload(load_spec(study))
    assert report.model == "Net" and report.dataset_len == 64 and report.parameters == 45
    assert report.loss > 0
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 0, result.stderr
    assert "workload built: Net (45 parameters), 64 samples" in " ".join(result.stdout.split())


def test_a_stream_is_built_and_its_first_samples_run(tmp_path: Path) -> None:
    study = write(tmp_path, DATASET="PointStream")
    report = check_workload(load_spec(study))
    assert report.dataset_len is None and report.loss > 0
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 0, result.stderr
    assert "workload built: Net (45 parameters), a stream, loss" in " ".join(result.stdout.split())


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_workload_is_one_line_exit_2_and_launches_nothing(tmp_path: Path, case: str) -> None:
    changes, expect = BROKEN[case]
    study = write(tmp_path, **changes)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {study}: workload"), line
    assert expect in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no runs/ folder, no database


def test_the_error_names_the_users_file_and_line(tmp_path: Path) -> None:
    study = write(tmp_path, LOSS="lambda m, b: m(b)")
    result = CliRunner().invoke(main, ["validate", str(study)])
    line_no = next(i for i, ln in enumerate((tmp_path / "wl.py").read_text().splitlines(), 1) if "m(b)" in ln)
    assert f"at {tmp_path / 'wl.py'}:{line_no}" in result.stderr


def test_a_typo_in_an_argument(tmp_path: Path) -> None:
    study = write(tmp_path, args=", args: {widht: 8}")
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "widht" in line and "width" in line, line


def test_no_build_skips_the_check(tmp_path: Path) -> None:
    study = write(tmp_path, LOSS="lambda m, b: m(**b)")
    result = CliRunner().invoke(main, ["validate", "--no-build", str(study)])
    assert result.exit_code == 0, result.stderr
    assert "workload built" not in result.stdout


@pytest.mark.slow
def test_what_the_workload_prints_is_held_back_when_it_is_refused(tmp_path: Path) -> None:
    study = write(tmp_path, LOSS="lambda m, b: m(**b)")
    wl = tmp_path / "wl.py"
    wl.write_text(wl.read_text().replace("def build(width=4):\n",
                                         "def build(width=4):\n    print('chatty library', file=sys.stderr)\n")
                  .replace("import torch\n", "import sys\nimport torch\n", 1))
    bad = subprocess.run([sys.executable, "-m", "autotune.cli", "validate", str(study)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    good = write(tmp_path)
    wl.write_text(wl.read_text().replace("def build(width=4):\n",
                                         "def build(width=4):\n    print('chatty library', file=sys.stderr)\n")
                  .replace("import torch\n", "import sys\nimport torch\n", 1))
    ok = subprocess.run([sys.executable, "-m", "autotune.cli", "validate", str(good)],
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0 and "chatty library" in ok.stderr, ok.stderr  # shown when nothing is wrong


def test_hugging_face_model_output_and_instance(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    root = Path(__file__).resolve().parent.parent / "studies"
    source = (root / "hf_gpt2.py").read_text()
    for name, (old, new), expect in (
        ("output", ("model(**batch).loss,", "model(**batch),"),
         "returned a CausalLMOutputWithCrossAttentions, not a scalar tensor; return its .loss"),
        ("instance", ("model=model,", "model=model(),"), "Workload.model is a GPT2LMHeadModel instance"),
        ("no_labels", ("model(**batch).loss,", "model(input_ids=batch['input_ids']),"),
         "holds no loss; pass the labels to the model"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        assert old in source
        (folder / "hf_gpt2.py").write_text(source.replace(old, new))
        (folder / "study.yaml").write_text((root / "hf_gpt2.yaml").read_text())
        result = CliRunner().invoke(main, ["validate", str(folder / "study.yaml")])
        assert result.exit_code == 2, result.stdout
        (line,) = result.stderr.splitlines()
        assert expect in line, line
    good = CliRunner().invoke(main, ["validate", str(root / "hf_gpt2.yaml")])
    assert good.exit_code == 0, good.stderr
    assert "workload built: GPT2LMHeadModel" in good.stdout


# -------------------------------------------------------------------------------------------------- warnings
def _warnings(tmp_path: Path, body: str) -> list[str]:
    study = write(tmp_path)
    study.write_text(study.read_text() + body)
    spec = load_spec(study)
    return study_warnings(spec, spec.resolved_device())


def test_lr_scaling_under_throughput_only_is_not_decided(tmp_path: Path) -> None:
    body = "search_space: {lr_scaling: {choices: [none, sqrt]}, grad_accum: {choices: [1, 2]}}\n"
    found = _warnings(tmp_path, body + "objectives: [{metric: throughput}]\n")
    assert any(w.startswith("search_space.lr_scaling:") and "does not decide lr_scaling" in w for w in found)
    assert any(w.startswith("search_space.grad_accum:") for w in found)
    assert _warnings(tmp_path, body + "objectives: [{metric: throughput}, {metric: loss}]\n") == []
    # under a held global batch neither changes the training: lr_scaling is not applied, grad_accum only splits
    held = body + "objectives: [{metric: throughput}]\nconstraints: {global_batch: 64}\n"
    assert not [w for w in _warnings(tmp_path, held) if "lr_scaling" in w or "grad_accum" in w]


@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_without_native_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    import autotune.workload_check._warnings as wc

    monkeypatch.setattr(wc, "native_bf16", lambda: native)
    found = _warnings(tmp_path, "search_space: {amp: {choices: [off, bf16]}}\n")
    assert any("no native bf16" in w for w in found) is not native
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "study.yaml")])
    assert ("no native bf16" in result.stdout) is not native


def test_native_bf16_reads_the_cpu_flags(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert native_bf16(str(info)) is False
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    assert native_bf16(str(info)) is True
    assert native_bf16(str(tmp_path / "none")) is None


@pytest.mark.parametrize(
    "name",
    ["quickstart.yaml", "hyperparameters.yaml", "hf_gpt2.yaml", "postgres.yaml", "images.yaml", "text_shards.yaml"],
)
def test_the_shipped_studies_ask_for_nothing_validate_warns_about(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The examples a newcomer runs first must not search what their own objectives cannot see (the
    # quickstart searched lr_scaling under a throughput objective: every such trial, and up to six
    # confirmation runs, compared two configurations of one speed). bf16's warning depends on the CPU.
    import autotune.workload_check._warnings as wc

    monkeypatch.setattr(wc, "native_bf16", lambda: True)
    spec = load_spec(Path(__file__).resolve().parent.parent / "studies" / name)
    assert study_warnings(spec, spec.resolved_device()) == []
