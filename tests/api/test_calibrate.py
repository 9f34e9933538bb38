"""autotune.calibrate(): a real (tiny) study, then the helpers a training script applies."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import autotune
from autotune.workload import study_workload

HERE = Path(__file__).parent
FAULTY = HERE.parent / "trial_runner" / "faulty.py"
ROOT = HERE.parent.parent


def _study(tmp_path: Path) -> Path:
    (tmp_path / "faulty.py").write_text(FAULTY.read_text())
    study = tmp_path / "study.yaml"
    study.write_text(
        """
name: api
workload: {entrypoint: faulty.py:build, args: {work: 20}}
search_space:
  batch_size: {choices: [16, 64]}
  num_workers: {choices: [0, 1]}
  amp: {choices: [off, bf16]}
  grad_accum: {choices: [1, 2]}
trial: {warmup_steps: 2, max_steps: 10, max_seconds: 40, report_every: 2}
sampler: {name: random, seed: 3}
pruner: {name: none}
budget: {n_trials: 3}
confirm: {top_k: 1, rounds: 4}  # the least: the calibration is under test, not the race (24 rounds: 35 s)
"""
    )
    return study


# The tests that read the module's calibrated study run on one pytest-xdist worker (--dist loadgroup), which runs
# the study once; spread over workers, each of theirs ran it again (~20 s apiece in the suite).
ON_THE_CALIBRATED_STUDY = pytest.mark.xdist_group("api_calibrated")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[autotune.Calibration, Path]:
    study = _study(tmp_path_factory.mktemp("api"))
    return autotune.calibrate(study), study


@ON_THE_CALIBRATED_STUDY
@pytest.mark.slow
def test_calibrate_returns_the_studys_choice(calibrated: tuple[autotune.Calibration, Path]) -> None:
    calibration, _ = calibrated
    assert calibration.study is not None
    trials = calibration.study.get_trials()
    assert sum(t.user_attrs.get("role") != "confirm" for t in trials) == 3
    assert calibration.confirmed
    chosen = [t for t in trials if autotune.TrialConfig.model_validate(t.user_attrs["config"]) == calibration.config]
    assert len(chosen) >= 2  # measured in the search and re-measured in the confirmation
    assert calibration.throughput_samples_s and calibration.throughput_samples_s > 0
    assert calibration.speedup is not None and calibration.baseline_throughput_samples_s


@ON_THE_CALIBRATED_STUDY
@pytest.mark.slow  # the module's calibrated study (~10 s) runs for these
def test_helpers_build_a_working_dataloader_and_ddp_model(
    calibrated: tuple[autotune.Calibration, Path], tmp_path: Path
) -> None:
    calibration, study = calibrated
    cfg = calibration.config
    workload = study_workload(autotune.load_spec(study))
    loader = DataLoader(workload.dataset(), **calibration.dataloader_kwargs())
    assert loader.batch_size == cfg.batch_size and loader.num_workers == cfg.num_workers
    x, _ = next(iter(loader))
    assert x.shape[0] == cfg.batch_size
    # a rank's step in its own process, as a user's launcher runs it (calibrated_rank.py says why)
    out = subprocess.run([sys.executable, str(HERE / "calibrated_rank.py"), str(study), str(tmp_path / "store")],
                         input=calibration.to_json(), capture_output=True, text=True, timeout=90, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["bucket_bytes_cap"] == cfg.bucket_cap_mb * 2**20
    assert seen["lr"] == pytest.approx(cfg.lr)
    assert seen["autocast"] == (cfg.amp == "bf16")
    assert math.isfinite(seen["loss"]) and seen["updated"]
    assert calibration.grad_scaler() is None  # fp16 only
    assert calibration.torchrun_args() == [f"--nproc-per-node={cfg.world_size}"]
    again = autotune.Calibration.from_json(calibration.to_json())
    assert again.config == cfg and again.dataloader_kwargs() == calibration.dataloader_kwargs()


@ON_THE_CALIBRATED_STUDY
@pytest.mark.slow  # the module's calibrated study (~10 s) runs for these
def test_load_calibration_reads_without_running(calibrated: tuple[autotune.Calibration, Path]) -> None:
    calibration, study = calibrated
    loaded = autotune.load_calibration(study)
    assert loaded.config == calibration.config
    assert len(loaded.study.get_trials()) == len(calibration.study.get_trials())


def test_calibrate_bad_override_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(autotune.UsageError, match=r"trial\.max_stepz"):
        autotune.calibrate(_study(tmp_path), trial__max_stepz=3)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.timeout(330)  # the example's own 300 s bounds it: 32 s alone, 94-120+ s beside two other workers
def test_example_launcher_calibrates_then_trains(tmp_path: Path) -> None:
    example = ROOT / "studies" / "calibrated_launcher.py"
    (tmp_path / "calibrated_launcher.py").write_text(example.read_text())
    quick = (ROOT / "studies" / "quickstart.yaml").read_text()
    # No confirmation race: the launcher is under test, not the race (test_calibrate_returns_the_studys_choice
    # checks calibrate()'s race); the search still chooses against the baseline, as the output below says.
    short = {"max_steps: 50": "max_steps: 15", "confirm: {top_k: 2}": "confirm: {top_k: 0}"}
    for long, shorter in short.items():
        assert long in quick, f"studies/quickstart.yaml no longer says {long!r}: shorten its new form here"
        quick = quick.replace(long, shorter)
    (tmp_path / "quickstart.yaml").write_text(quick)
    out = subprocess.run([sys.executable, str(tmp_path / "calibrated_launcher.py"), "--n-trials", "2",
                          "--steps", "12"], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    # the choice against the baseline: a speed-up, or (nothing beat it by more than the spread) the defaults
    assert "calibrated: " in out.stdout
    assert "x the baseline" in out.stdout or "the default configuration: nothing beat it" in out.stdout
    losses = [float(line.split("loss ")[1]) for line in out.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3 and losses[-1] < losses[0]


@pytest.mark.slow
def test_calibrate_a_spec_with_a_fixed_knob_and_leave_the_process_as_it_was(tmp_path: Path) -> None:
    # calibrate(spec, **overrides) re-validates the spec: a fixed knob (amp: off) must survive that, and the
    # caller's process must not stay a child subreaper after the launcher is closed, nor hold the study's database
    # open while it trains (nor a rank after load_calibration). In a fresh interpreter: this test process may be
    # a subreaper already (other launchers of the session).
    study = _study(tmp_path)
    study.write_text(study.read_text().replace("amp: {choices: [off, bf16]}", "amp: off"))
    script = f"""
import contextlib, ctypes, os, autotune
libc = ctypes.CDLL(None, use_errno=True)
def subreaper():
    value = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(value), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    return value.value
def held():  # the study's SQLite file (and its journal) open in this process
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            paths.append(os.readlink(f"/proc/self/fd/{{fd}}"))
    return sum(".db" in os.path.basename(p) for p in paths)
spec = autotune.load_spec({str(study)!r})
calibration = autotune.calibrate(spec, budget__n_trials=1, confirm__top_k=0)
print(calibration.config.amp, calibration.default_is_best, subreaper(), held())
loaded = autotune.load_calibration(spec)
print(loaded.config == calibration.config, held())
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         check=False, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    # the baseline alone: the default is the choice; no database handle left, after calibrate or load_calibration
    assert out.stdout.split()[-6:] == ["off", "True", "0", "0", "True", "0"], out.stdout


def test_ctrl_c_inside_calibrate_is_the_launchers_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reaches the launcher as it would without calibrate(): a KeyboardInterrupt (the tuner's own
    Interrupted is its cause), once what ran is recorded and the launcher closed."""
    from autotune.tuner import Interrupted, NoLaunch, _loop

    closed: list[bool] = []

    class CtrlCWhilePreparing(NoLaunch):
        def prepare(self, plan: object) -> None:
            raise KeyboardInterrupt

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(_loop, "make_launcher", lambda spec: CtrlCWhilePreparing())
    with pytest.raises(KeyboardInterrupt) as stop:
        autotune.calibrate(_study(tmp_path), n_trials=2)
    assert isinstance(stop.value.__cause__, Interrupted) and stop.value.__cause__.exit_code == 130
    assert closed == [True]
