"""Loading a study: a study file or a document, ``--set`` overrides applied, validated into a StudySpec."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.errors import StudyFileError
from autotune.spec._study import StudySpec
from autotune.spec._text import yaml_type
from autotune.spec._validation import format_validation_error
from autotune.spec._yaml import read_yaml


def read_spec(path: str | Path, overrides: Sequence[str] = ()) -> StudySpec:
    """Read and validate a study file, without importing its workload.

    ``overrides`` are ``key.path=value`` strings applied before validation (``trial.max_steps=10``).
    :func:`autotune.workload_check.load_spec` (``autotune.load_spec``) also checks the workload fits.
    """
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyFileError(f"{source}: no such file; check the path") from None
    except IsADirectoryError:
        raise StudyFileError(f"{source}: is a folder; give the study .yaml file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise StudyFileError(f"{source}: cannot be read ({e.__class__.__name__}: {e})") from None
    document = read_yaml(text, source)
    return parse_spec(document, source=source, base_dir=path.resolve().parent, overrides=overrides)


def parse_spec(
    document: Any, source: str = "<python>", base_dir: Path | None = None, overrides: Sequence[str] = ()
) -> StudySpec:
    """Validate a study document (already parsed YAML or a dict) into a StudySpec."""
    if document is None:
        raise StudyFileError(f"{source}: the file is empty; write a study (see studies/quickstart.yaml)")
    if not isinstance(document, Mapping):
        raise StudyFileError(
            f"{source}: the document is a {yaml_type(document)}, not a mapping; "
            "a study file is a mapping of keys such as name:, workload:, search_space:"
        )
    document = apply_overrides(dict(document), overrides, source)
    for key in document:
        if not isinstance(key, str):
            raise StudyFileError(f"{source}: {key!r}: keys must be strings; quote the key")
    try:
        spec = StudySpec.model_validate(document)
    except ValidationError as e:
        raise StudyFileError(f"{source}: {format_validation_error(e)}") from None
    return spec.bind(base_dir or Path.cwd(), source)


def apply_overrides(document: dict[str, Any], overrides: Iterable[str], source: str) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides to a study document; the value is read as YAML (``x=[1, 2]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise StudyFileError(
                f"{source}: --set {item!r}: expected key=value, e.g. --set trial.max_steps=20"
            )
        value = read_yaml(raw, f"{source}: --set {key}") if raw.strip() else None
        parts = key.strip().split(".")
        node: dict[str, Any] = document
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, Mapping):
                raise StudyFileError(
                    f"{source}: --set {key}: {part!r} is not a mapping; "
                    "set a key under a mapping such as trial"
                )
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = value
    return document

