"""Security: study files are plain data (YAML tags are refused, never executed), a study name cannot reach
outside the study's folder, storage passwords are never printed, logged or stored, the dashboard listens on
loopback unless told otherwise (and warns then), and trials see only the environment they need."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import psutil
import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.tuner import Tuner
from autotune.workload_check import load_spec
from tests._cli import autotune
from tests.test_spec import WORKLOAD_PY, listing

from .conftest import MARK_ENV, StudyDir, assert_nothing_left

WORKLOAD = "workload: {entrypoint: 'chaos.py:build'}\n"


# ----------------------------------------------------------------------------------------- YAML, safely
def _payloads(marker: Path) -> dict[str, str]:
    """Study files that would create ``marker`` if any YAML tag in them were executed."""
    system = f'!!python/object/apply:os.system ["touch {marker}"]'
    call = f'!!python/object/apply:subprocess.call [["touch", "{marker}"]]'
    return {
        "name": f"name: {system}\n{WORKLOAD}",
        "workload_args": f"name: probe\nworkload: {{entrypoint: 'chaos.py:build', args: {{samples: {system}}}}}\n",
        "knob": f"name: probe\n{WORKLOAD}search_space:\n  batch_size: {call}\n",
        "nested_list": f"name: probe\n{WORKLOAD}objectives:\n  - {{metric: {system}}}\n",
        "storage": f"name: probe\n{WORKLOAD}storage: !!python/object/new:subprocess.Popen [[touch, {marker}]]\n",
        "module_attr": f"name: probe\n{WORKLOAD}trial: {{max_steps: !!python/name:os.system ''}}\n",
    }


@pytest.mark.parametrize("where", list(_payloads(Path("x"))))
@pytest.mark.parametrize("command", ["run", "validate", "status", "best", "report", "dashboard", "trial"])
def test_yaml_tags_are_refused_and_never_executed(tmp_path: Path, command: str, where: str) -> None:
    marker = tmp_path / "PWNED"
    study = tmp_path / "study.yaml"
    study.write_text(_payloads(marker)[where])
    before = listing(tmp_path)
    result = CliRunner().invoke(main, [command, str(study)])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {study}: ") and "is not allowed (study files are plain data)" in line, line
    assert not marker.exists(), "a YAML tag was executed"
    assert listing(tmp_path) == before


def test_a_tag_in_a_set_override_is_refused_too(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    study = tmp_path / "study.yaml"
    study.write_text(f"name: probe\n{WORKLOAD}")
    override = f'workload.args={{samples: !!python/object/apply:os.system ["touch {marker}"]}}'
    out = autotune("run", "study.yaml", "--set", override, cwd=tmp_path)
    assert out.exit_code == 2, out.output
    assert "is not allowed" in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert not marker.exists()


# ----------------------------------------------------------------------------------------- study names
@pytest.mark.parametrize("name", ["../escape", "..", "a/../../escape", "/tmp/escape", "runs/../../escape", ".",
                                  "x/y", "~/escape", "a\\..\\escape", "-rf"])
@pytest.mark.parametrize("how", ["file", "set"])
def test_a_study_name_cannot_leave_the_study_folder(tmp_path: Path, name: str, how: str) -> None:
    folder = tmp_path / "deep" / "study"
    folder.mkdir(parents=True)
    (folder / "chaos.py").write_text((Path(__file__).parent / "chaos.py").read_text())
    study = folder / "study.yaml"
    text = f"name: {json.dumps(name)}\n{WORKLOAD}" if how == "file" else f"name: probe\n{WORKLOAD}"
    study.write_text(text)
    args = ["--set", f"name={json.dumps(name)}"] if how == "set" else []
    before = listing(tmp_path)
    result = CliRunner().invoke(main, ["run", str(study), *args])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.splitlines()
    assert f"name: {name!r} is not a safe study name" in line, line
    assert listing(tmp_path) == before, "something was written"


# ----------------------------------------------------------------------------------------- passwords
SECRET = "s3cr3t-Hunter2"
URLS = {
    "userinfo": f"postgresql+psycopg://tuner:{SECRET}@127.0.0.1:1/autotune",
    "query": f"postgresql+psycopg://tuner@127.0.0.1:1/autotune?password={SECRET}",
}


@pytest.mark.parametrize("form", list(URLS))
@pytest.mark.parametrize(
    "command",
    [("validate",), ("run",), ("status",), ("best",), ("report",), ("dashboard", "--port", "0"),
     ("run", "--debug"), ("run", "--storage"), ("status", "--storage"), ("best", "--storage"), ("validate", "--set")],
    ids=lambda c: "-".join(x.strip("-") for x in c),
)
def test_storage_passwords_are_never_printed(tmp_path: Path, form: str, command: tuple[str, ...]) -> None:
    """Refused connections (nothing listens on port 1) through every command, the URL given in the study
    file, with --storage or with --set: the password appears nowhere, the URL does (redacted)."""
    url = URLS[form]
    (tmp_path / "wl.py").write_text(WORKLOAD_PY)  # no torch to import: a quick refusal
    head = "name: probe\nworkload: {entrypoint: 'wl.py:build'}\n"
    verb, *rest = command
    if rest == ["--storage"]:
        (tmp_path / "study.yaml").write_text(head)
        args = [verb, "study.yaml", "--storage", url]
    elif rest == ["--set"]:
        (tmp_path / "study.yaml").write_text(head)
        args = [verb, "study.yaml", "--set", f"storage={url}"]
    else:
        (tmp_path / "study.yaml").write_text(f"{head}storage: '{url}'\n")
        args = ["--debug", verb, "study.yaml"] if rest == ["--debug"] else [verb, "study.yaml", *rest]
    out = autotune(*args, cwd=tmp_path)  # in this process: its stdout, stderr, traceback, warnings and logs
    shown = out.output
    assert SECRET not in shown, shown
    if verb != "validate":
        assert out.exit_code in (1, 2), shown
        assert "127.0.0.1:1/autotune" in shown, shown  # the redacted URL is still named
        if rest != ["--debug"]:
            (line,) = out.stderr.splitlines()
            assert line.startswith("error: ") and "Connection refused" in line, line
    leaked = [str(p) for p in tmp_path.rglob("*")
              if p.is_file() and p.name != "study.yaml" and SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked


def test_a_password_is_stored_nowhere_by_a_study_that_ran(
    make_study: Callable[..., StudyDir], started: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study whose file names a PostgreSQL URL with a password, run (on SQLite, standing in for the
    server) through the Python API: the password is in no file the study wrote — its database (the study
    file is stored as a study attribute, where dashboards show it), trial folders, artifacts, logs."""
    sd = make_study("stored", storage=URLS["userinfo"], search_space={"batch_size": {"choices": [8, 16]}})
    for key, value in sd.env.items():
        if key in (MARK_ENV, "AUTOTUNE_LEASE_DIR"):
            monkeypatch.setenv(key, value)
    spec = load_spec(sd.file)
    summary = Tuner(spec, storage_url=sd.url).run(n_trials=2)
    assert summary.counts.get("complete") == 2, summary.counts
    stored = sd.load().user_attrs["autotune"]["spec"]["storage"]
    assert stored == "postgresql+psycopg://tuner:***@127.0.0.1:1/autotune"
    written = [p for p in sd.folder.rglob("*") if p.is_file() and p != sd.file]
    assert any(p.suffix == ".db" for p in written) and any(p.name == "config.json" for p in written)
    leaked = [str(p) for p in written if SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert_nothing_left(sd, started)


# ----------------------------------------------------------------------------------------- the dashboard
def _serve(folder: Path, *args: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "dashboard", "study.yaml", "--port", "0", *args],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "optuna-dashboard for NAME: URL (Ctrl-C stops it)", once it listens
    assert "optuna-dashboard for" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    listening = []
    deadline = time.monotonic() + 10
    while not listening and time.monotonic() < deadline:
        listening = [f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.Process(proc.pid).net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        time.sleep(0.05)
    return proc, line, listening


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    return err


@pytest.fixture
def stored_study(tmp_path: Path) -> Path:
    folder = tmp_path / "dash"
    folder.mkdir()
    (folder / "study.yaml").write_text(f"name: dash\n{WORKLOAD}")
    optuna.create_study(study_name="dash", storage=f"sqlite:///{folder / 'dash.db'}")
    return folder


def test_the_dashboard_listens_on_loopback_by_default(stored_study: Path) -> None:
    proc, line, listening = _serve(stored_study)
    try:
        assert "http://127.0.0.1:" in line, line
        assert listening and all(addr.startswith("127.0.0.1:") for addr in listening), listening
    finally:
        err = _stop(proc)
    assert "warning" not in err, err


def test_the_dashboard_warns_when_it_listens_beyond_loopback(stored_study: Path) -> None:
    proc, _, listening = _serve(stored_study, "--host", "0.0.0.0")
    try:
        assert listening and all(addr.startswith("0.0.0.0:") for addr in listening), listening
    finally:
        err = _stop(proc)
    assert err.splitlines()[0] == ("warning: listening on 0.0.0.0: the dashboard has no authentication; anyone "
                                   "who can reach this address can read and change the study"), err



def test_the_dashboard_serves_a_study_whose_storage_is_given_by_option(stored_study: Path, tmp_path: Path) -> None:
    # workers sharing a database, or a study kept off a small disk, run with --storage URL: the dashboard reads
    # that study too, as run, status, best, plan and report do
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (stored_study / "dash.db").rename(elsewhere / "dash.db")
    proc, line, _ = _serve(stored_study, "--storage", f"sqlite:///{elsewhere / 'dash.db'}")
    try:
        assert line.startswith("optuna-dashboard for dash: http://127.0.0.1:"), line
    finally:
        _stop(proc)
    assert not (stored_study / "dash.db").exists()  # nothing created where the study file points

# ----------------------------------------------------------------------------------------- trial environments
@pytest.mark.slow
@pytest.mark.parametrize("start", ["warm", "torchrun"])
def test_trials_see_only_the_environment_they_need(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path, start: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "rank0-environ.json"
    sd = make_study(f"env-{start}", workload_args={"env_dump": str(dump)}, launcher={"start": start},
                    baseline={"world_size": 2}, trial={"max_steps": 4, "warmup_steps": 1, "max_seconds": 120})
    secrets = {"AWS_SECRET_ACCESS_KEY": "xyz-aws", "GITHUB_TOKEN": "ghp-xyz", "DATABASE_URL": "postgres://u:pw@db/x",
               "OPENAI_API_KEY": "sk-xyz", "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock"}
    for key in (MARK_ENV, "AUTOTUNE_LEASE_DIR"):
        monkeypatch.setenv(key, sd.env[key])
    monkeypatch.delenv("AUTOTUNE_CORES_PER_RANK", raising=False)
    out = autotune("run", "study.yaml", "--n-trials", "1", cwd=sd.folder, env=secrets)  # secrets in the tuner's env
    assert out.exit_code == 0, out.output
    assert sd.load().trials[0].user_attrs["outcome"] == "complete"
    environ = json.loads(dump.read_text())
    assert environ["RANK"] == "0" and environ["WORLD_SIZE"] == "2"  # it is a rank's
    assert environ[MARK_ENV] == sd.mark  # of this study's trial
    assert "PATH" in environ
    assert not set(secrets) & set(environ), sorted(set(secrets) & set(environ))
    assert not [k for k, v in environ.items() if any(s in v for s in secrets.values())]
    assert_nothing_left(sd, started)
