"""`autotune dashboard` refusals (no browser): a missing study, a busy port, a non-loopback host."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from autotune.cli import main
from autotune.report import dashboard_url, is_loopback

from .conftest import Built
from .studies import write_study_file


def test_missing_study_is_one_line_exit_2(tmp_path: Path) -> None:
    yaml = write_study_file(tmp_path, "nothing-yet", [("throughput", "maximize")])
    result = CliRunner().invoke(main, ["dashboard", str(yaml), "--port", "0"])
    assert result.exit_code == 2
    assert result.output.startswith("error: no study named 'nothing-yet' in sqlite:///")
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "nothing-yet.db").exists()


def test_busy_port_is_one_line_exit_2(single: Built) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["dashboard", str(single.yaml), "--port", str(port)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: cannot listen on 127.0.0.1:{port} (Address already in use); pick "
                                     "another with --port (0 picks a free one) or --host")


def test_non_loopback_host_warns_that_there_is_no_authentication(single: Built) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails after the warning, so nothing
    # ever listens beyond loopback.
    result = CliRunner().invoke(main, ["dashboard", str(single.yaml), "--host", "192.0.2.1", "--port", "0"])
    lines = result.output.strip().splitlines()
    assert lines[0] == ("warning: listening on 192.0.2.1: the dashboard has no authentication; anyone who can "
                        "reach this address can read and change the study")
    assert result.exit_code == 2 and lines[1].startswith("error: cannot listen on 192.0.2.1:0")


def test_loopback_hosts_and_urls() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")
    assert dashboard_url("::1", 8080, 3) == "http://[::1]:8080/dashboard/studies/3"
    assert dashboard_url("127.0.0.1", 81) == "http://127.0.0.1:81/dashboard/"
