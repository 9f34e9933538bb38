"""The README and docs/reference.md stay true to the code: commands, every study-file key, knob defaults."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from autotune.knobs import KNOBS
from autotune.spec import Choices, Fixed, SearchSpaceSpec, StudySpec, parse_spec, read_yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()

INSTALL_AND_RUN = "pip install torch==2.13.0 -e . && autotune run studies/quickstart.yaml"
INSTALL_AND_TEST = "pip install torch==2.13.0 -e '.[test]' && python -m pytest -n 3 --dist loadgroup"


def code_blocks(text: str, lang: str = "") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key of the study file, as dotted paths (the ten knobs are checked on their own)."""
    paths = []
    for name, info in model.model_fields.items():
        paths.append(prefix + name)
        annotation = info.annotation
        nested = [a for a in (getattr(annotation, "__args__", None) or (annotation,)) if isinstance(a, type)]
        for sub in nested:
            # a knob's value shapes ({value}, {choices}) are not keys: constraints.global_batch takes them too
            if issubclass(sub, BaseModel) and sub not in (SearchSpaceSpec, Fixed, Choices):
                paths.extend(key_paths(sub, prefix + name + "."))
    return paths


def test_readme_set_up_is_exactly_two_one_line_commands() -> None:
    set_up = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert [b.strip() for b in code_blocks(set_up)] == [INSTALL_AND_RUN, INSTALL_AND_TEST]


def test_ci_runs_the_readme_commands_in_a_fresh_venv() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in ci
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111
    # A venv of its own, without the machine's site-packages, and no install step a newcomer would not run.
    assert re.search(r"^python3 -m venv ", ci, re.M) and "system-site-packages" not in ci
    code = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not [line for line in code if "pip install" in line or "apt-get" in line]
    # The two commands it runs are read from the README's "## Set up", as a newcomer reads them.
    extract = next(line for line in code if line.startswith("mapfile"))
    out = subprocess.run(["bash", "-c", extract + '\nprintf "%s\\n" "${commands[@]}"'], cwd=ROOT,
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.splitlines() == [INSTALL_AND_RUN, INSTALL_AND_TEST]
    assert re.search(r'^for command in "\$\{commands\[@\]\}"', ci, re.M)


@pytest.mark.parametrize("path", key_paths(StudySpec))
def test_every_study_file_key_is_documented(path: str) -> None:
    leaf = path.rsplit(".", 1)[-1]
    # README: a table row for the key (`key` or `section.key`)
    assert re.search(rf"^\| `({re.escape(path)}|{re.escape(leaf)})` \|", README, re.M), path
    # reference: the key appears in the annotated study file
    assert re.search(rf"\b{re.escape(leaf)}\b", REFERENCE), path


@pytest.mark.parametrize("knob", list(KNOBS))
def test_every_knob_is_documented_with_its_default(knob: str) -> None:
    default = KNOBS[knob].default
    if default is None:
        shown = "base_batch_size"  # batch_size: the workload's base batch
    elif isinstance(default, bool):
        shown = "true" if default else "false"
    else:
        shown = str(default)
    for text in (README, REFERENCE):
        row = re.search(rf"^\| `{knob}` \|.*$", text, re.M)
        assert row, knob
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.group(0).strip("|"))]
        assert re.search(rf"\b{shown}\b", cells[2]), (knob, cells)


@pytest.mark.parametrize(
    "document",
    [code_blocks(README, "yaml")[0], code_blocks(REFERENCE, "yaml")[0]],
    ids=["readme_example", "reference_shape"],
)
def test_documented_study_files_are_valid(document: str, tmp_path: Path) -> None:
    spec = parse_spec(read_yaml(document, "doc.yaml"), source="doc.yaml", base_dir=tmp_path)
    assert spec.name == "mlp-quickstart"


def test_reference_yaml_shows_the_real_defaults() -> None:
    """The annotated shape in docs/reference.md gives each section's defaults; they must be the code's."""
    shape = read_yaml(code_blocks(REFERENCE, "yaml")[0], "reference")
    defaults = StudySpec.model_validate({"name": "x", "workload": {"entrypoint": "m:f"}})
    for section in ("trial", "constraints", "sampler", "pruner", "budget", "confirm"):
        documented = shape[section]
        actual = getattr(defaults, section).model_dump()
        for key, value in documented.items():
            assert actual[key] == value, (section, key)
    assert shape["launcher"]["kind"] == defaults.launcher.kind
    assert shape["launcher"]["device"] == defaults.launcher.device
