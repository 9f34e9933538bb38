"""Serve optuna-dashboard on a study file's storage, with the trials' logs as artifacts."""

from __future__ import annotations

import ipaddress
import signal
import socket
from collections.abc import Callable
from socketserver import ThreadingMixIn
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from autotune.compat import optuna_private
from autotune.errors import UsageError
from autotune.spec import StudySpec

__all__ = ["DashboardError", "dashboard_url", "is_loopback", "serve_dashboard"]


class DashboardError(UsageError):
    """The dashboard cannot start: optuna-dashboard missing, or the address cannot be bound. Exit 2."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for anything else."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dashboard_url(host: str, port: int, study_id: int | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    path = f"dashboard/studies/{study_id}" if study_id is not None else "dashboard/"
    return f"http://{shown}:{port}/{path}"


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def serve_dashboard(
    spec: StudySpec, host: str = "127.0.0.1", port: int = 8080, announce: Callable[[str], None] = print
) -> None:
    """Serve optuna-dashboard for ``spec``'s study until Ctrl-C or SIGTERM; then close the socket.

    ``port`` 0 picks a free port. ``announce`` receives the study page's URL once the socket listens.
    The study must exist (StudyNotFoundError otherwise); the trials' artifacts are read from
    ``runs/<name>/artifacts`` beside the study file.
    """
    try:
        import optuna_dashboard
    except ImportError:
        raise DashboardError("optuna-dashboard is not installed; pip install 'autotune[dashboard]'") from None
    from autotune.report._artifacts import artifact_store_for
    from autotune.report._study import open_study

    study = open_study(spec)
    app = optuna_dashboard.wsgi(spec.storage_url(), artifact_store=artifact_store_for(spec))
    server_class = _Server6 if ":" in host else _Server
    try:
        server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as e:
        raise DashboardError(f"cannot listen on {host}:{port} ({e.strerror or e}); pick another with --port "
                             "(0 picks a free one) or --host") from None
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        bound_port = server.server_address[1]
        announce(dashboard_url(host, bound_port, optuna_private.study_id(study)))
        server.serve_forever(poll_interval=0.2)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
