"""Reading YAML safely: only true/false are booleans, no tags, syntax errors as one line with the position."""

from __future__ import annotations

import re
from typing import Any

import yaml

from autotune.errors import StudyFileError


class _Loader(yaml.SafeLoader):
    """A safe loader where only true/false are booleans (YAML 1.1 would read ``amp: off`` as false)."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _construct_undefined(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag!r} is not allowed (study files are plain data)", node.start_mark
    )


_Loader.add_constructor(None, _construct_undefined)


def read_yaml(text: str, source: str) -> Any:
    """Parse YAML text safely; syntax errors become one-line StudyFileErrors with the line number."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = e.problem or e.context or "invalid YAML"
        raise StudyFileError(f"{source}: {where}: {problem}; fix the YAML syntax") from None
    except yaml.YAMLError as e:
        raise StudyFileError(f"{source}: invalid YAML ({e}); fix the YAML syntax") from None

