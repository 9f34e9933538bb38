"""Open a study file's Optuna study for reading, with one-line errors when it is not there."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.errors import UsageError, first_line
from autotune.spec import StudySpec

__all__ = ["StudyNotFoundError", "open_study", "redacted_storage"]


class StudyNotFoundError(UsageError):
    """The study file's storage has no study of that name (or cannot be opened). Exit status 2."""


def redacted_storage(url: str) -> str:
    """The storage URL with any password hidden, for messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from autotune.spec import redact_url

    try:
        return redact_url(make_url(url).render_as_string(hide_password=True))  # redact_url: ?password= too
    except (ArgumentError, ValueError):
        return "<storage>"


def open_study(spec: StudySpec) -> optuna.Study:
    """Load the spec's study from ``spec.storage_url()`` without creating anything.

    An SQLite file that does not exist is reported, not created (Optuna would create an empty one).
    """
    url = spec.storage_url()
    shown = redacted_storage(url)
    missing = f"no study named {spec.name!r} in {shown}; run `autotune run {spec.source}` first"
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:" and not Path(database).is_file():
        raise StudyNotFoundError(missing)
    try:
        storage = optuna.storages.RDBStorage(url, skip_table_creation=True)
        return optuna.load_study(study_name=spec.name, storage=storage)
    except KeyError:
        raise StudyNotFoundError(missing) from None
    except Exception as e:  # sqlalchemy's, Optuna's and the drivers' errors share no useful base
        if _no_tables(e):  # a database that holds no Optuna study at all
            raise StudyNotFoundError(missing) from None
        cause = _innermost(e)  # Optuna wraps the driver's error ("connection refused") in a generic one
        first = first_line(cause, "")
        raise StudyNotFoundError(f"cannot read the storage {shown}: {type(cause).__name__}: {first}") from e


def _innermost(error: BaseException) -> BaseException:
    while error.__cause__ is not None and error.__cause__ is not error:
        error = error.__cause__
    return error


def _no_tables(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        text = str(seen)
        if "no such table" in text or ("relation" in text and "does not exist" in text):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
