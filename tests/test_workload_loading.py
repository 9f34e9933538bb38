"""The workload contract: entrypoints, how often the function runs, and what a Workload accepts."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autotune import Workload, WorkloadError, load_spec
from autotune.cli import main
from autotune.search_space import study_space
from autotune.workload import default_optimizer, load_workload, study_workload

# A workload file that records every call of its function, and every import of itself, in side files.
COUNTING = """\
from pathlib import Path

import autotune

HERE = Path(__file__).parent
with open(HERE / "imports.log", "a") as f:
    f.write("import\\n")


class Block:
    pass


def build(hidden=8, tag="x"):
    with open(HERE / "calls.log", "a") as f:
        f.write(f"{hidden} {tag}\\n")
    return autotune.Workload(
        model=lambda: hidden, dataset=lambda: [], loss=lambda m, b: 0.0,
        base_lr=3e-4, base_batch_size=16, checkpoint_modules=(Block,),
    )
"""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """An importable package with a unique name (so no test sees another's cached module)."""
    name = f"wlpkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "site"
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    yield name, root / name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def write_study(folder: Path, entrypoint: str, args: str = "{}", extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    study = folder / "study.yaml"
    study.write_text(f"name: wl\nworkload: {{entrypoint: '{entrypoint}', args: {args}}}\n{extra}")
    return study


# --------------------------------------------------------------------------------------- entrypoints
def test_module_function_entrypoint(package: tuple[str, Path], tmp_path: Path) -> None:
    name, folder = package
    (folder / "models.py").write_text(COUNTING)
    workload = load_workload(f"{name}.models:build", {"hidden": 32})
    assert isinstance(workload, Workload)
    assert workload.model() == 32
    assert (workload.base_lr, workload.base_batch_size) == (3e-4, 16)
    assert lines(folder / "calls.log") == ["32 x"]


def test_file_entrypoint_is_relative_to_the_study_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study_dir = tmp_path / "project" / "studies"
    (study_dir / "nets").mkdir(parents=True)
    (study_dir / "nets" / "counting.py").write_text(COUNTING)
    study = write_study(study_dir, "nets/counting.py:build", "{hidden: 7, tag: rel}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory does not matter
    spec = load_spec(study)
    assert study_workload(spec).model() == 7
    assert lines(study_dir / "nets" / "calls.log") == ["7 rel"]


def test_file_entrypoint_imports_its_neighbours(tmp_path: Path) -> None:
    helper = f"helper_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{helper}.py").write_text("BASE_LR = 0.25\n")
    (tmp_path / "net.py").write_text(
        f"import autotune\nfrom {helper} import BASE_LR\n\n"
        "def build():\n"
        "    return autotune.Workload(model=lambda: None, dataset=lambda: [], loss=lambda m, b: 0.0,"
        " base_lr=BASE_LR)\n"
    )
    try:
        assert load_workload("net.py:build", base_dir=tmp_path).base_lr == 0.25
        assert str(tmp_path) not in sys.path  # the folder was on sys.path only while importing
    finally:
        sys.modules.pop(helper, None)


def test_absolute_file_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "abs.py").write_text(COUNTING)
    workload = load_workload(f"{tmp_path / 'abs.py'}:build", {"hidden": 3}, base_dir=Path("/nonexistent"))
    assert workload.model() == 3


def test_loading_a_file_writes_no_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (tmp_path / "net.py").write_text(COUNTING)
    load_workload("net.py:build", base_dir=tmp_path)
    assert not (tmp_path / "__pycache__").exists()
    assert sys.dont_write_bytecode is False  # restored


# --------------------------------------------------------------------------------------- called once
def test_function_called_exactly_once_per_study(tmp_path: Path) -> None:
    (tmp_path / "counting.py").write_text(COUNTING)
    study = write_study(tmp_path, "counting.py:build", "{hidden: 5}")
    spec = load_spec(study)  # validates: imports and calls the function now, so a typo fails early
    assert lines(tmp_path / "calls.log") == ["5 x"]
    study_workload(spec)
    study_space(spec)
    study_workload(spec)
    assert lines(tmp_path / "calls.log") == ["5 x"]  # cached on the spec: never called again
    assert lines(tmp_path / "imports.log") == ["import"]


def test_validate_calls_the_function_once(tmp_path: Path) -> None:
    (tmp_path / "counting.py").write_text(COUNTING)
    study = write_study(tmp_path, "counting.py:build")
    result = CliRunner().invoke(main, ["validate", "--no-build", str(study)])
    assert result.exit_code == 0, result.stderr
    assert lines(tmp_path / "calls.log") == ["8 x"]


def test_without_check_workload_nothing_is_imported(tmp_path: Path) -> None:
    (tmp_path / "counting.py").write_text(COUNTING)
    spec = load_spec(write_study(tmp_path, "counting.py:build"), check_workload=False)
    assert lines(tmp_path / "imports.log") == []
    study_workload(spec)
    assert lines(tmp_path / "calls.log") == ["8 x"]


def test_read_spec_reads_the_file_without_the_workload(tmp_path: Path) -> None:
    """autotune.spec only reads the study file; a workload that cannot be imported fails in load_spec."""
    from autotune.spec import read_spec

    study = write_study(tmp_path, "missing_module.py:build")
    spec = read_spec(study, overrides=["trial.max_steps=9"])
    assert spec.trial.max_steps == 9 and spec.source == str(study)
    with pytest.raises(WorkloadError, match=r"workload\.entrypoint: missing_module\.py:build"):
        load_spec(study)


def test_each_spec_builds_its_own_workload_once(tmp_path: Path) -> None:
    (tmp_path / "counting.py").write_text(COUNTING)
    study = write_study(tmp_path, "counting.py:build")
    first = load_spec(study, check_workload=False)
    second = load_spec(study, check_workload=False)
    assert study_workload(first) is study_workload(first)
    assert study_workload(second) is not study_workload(first)
    assert lines(tmp_path / "calls.log") == ["8 x", "8 x"]


def test_a_file_is_imported_once_per_process(tmp_path: Path) -> None:
    """load_workload calls the function each time it is asked; the module itself is imported once."""
    (tmp_path / "counting.py").write_text(COUNTING)
    load_workload("counting.py:build", {"tag": "a"}, base_dir=tmp_path)
    load_workload("counting.py:build", {"tag": "b"}, base_dir=tmp_path)
    assert lines(tmp_path / "imports.log") == ["import"]
    assert lines(tmp_path / "calls.log") == ["8 a", "8 b"]


# --------------------------------------------------------------------------------------- errors
def one_line_error(entrypoint: str, args: dict[str, Any] | None = None, base_dir: Path | None = None) -> str:
    with pytest.raises(WorkloadError) as info:
        load_workload(entrypoint, args, base_dir=base_dir)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{entrypoint}: ")
    return message


def test_typo_in_function_name(tmp_path: Path, package: tuple[str, Path]) -> None:
    (tmp_path / "net.py").write_text(COUNTING)
    message = one_line_error("net.py:biuld", base_dir=tmp_path)
    assert message.endswith("net.py has no 'biuld'; did you mean 'build'?")
    name, folder = package
    (folder / "models.py").write_text(COUNTING)
    message = one_line_error(f"{name}.models:buidl")
    assert message.endswith(f"{name}.models has no 'buidl'; did you mean 'build'?")
    assert "check the function name" in one_line_error(f"{name}.models:zzzzzz")


def test_missing_module_and_missing_file(tmp_path: Path, package: tuple[str, Path]) -> None:
    name, _ = package
    assert "no module named 'no_such_top_level_pkg'; check the module path" in one_line_error(
        "no_such_top_level_pkg.models:build"
    )
    assert f"no module named '{name}.nope'; check the module path" in one_line_error(f"{name}.nope:build")
    message = one_line_error("models/nope.py:build", base_dir=tmp_path)
    missing = tmp_path / "models" / "nope.py"
    assert f"file {missing} does not exist; the path is relative to the study file" in message


def test_import_error_inside_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text("import autotune\nimport definitely_not_installed_dep\n")
    message = one_line_error("net.py:build", base_dir=tmp_path)
    assert "importing net.py raised ModuleNotFoundError: No module named 'definitely_not_inst" in message
    assert "--debug" in message
    # A failed import is not cached: fix the file and it loads.
    (tmp_path / "net.py").write_text(COUNTING)
    assert load_workload("net.py:build", base_dir=tmp_path).base_lr == 3e-4


def test_import_error_inside_a_module_names_the_dependency(package: tuple[str, Path]) -> None:
    name, folder = package
    (folder / "models.py").write_text("import definitely_not_installed_dep\n")
    message = one_line_error(f"{name}.models:build")
    dependency = "No module named 'definitely_not_installed_dep'"
    assert f"importing {name}.models raised ModuleNotFoundError: {dependency}" in message
    assert "check the module path" not in message  # the module is there; its dependency is not


def test_syntax_error_and_exception_at_import(tmp_path: Path) -> None:
    (tmp_path / "syn.py").write_text("def build(:\n    pass\n")
    assert "importing syn.py raised SyntaxError" in one_line_error("syn.py:build", base_dir=tmp_path)
    (tmp_path / "boom.py").write_text("raise RuntimeError('no GPU here\\nsecond line')\n")
    message = one_line_error("boom.py:build", base_dir=tmp_path)
    assert "importing boom.py raised RuntimeError: no GPU here;" in message


def test_function_raising_and_bad_args(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(
        textwrap.dedent(
            """\
            def build(size=1):
                raise ValueError("size must be even")

            not_a_function = 3
            """
        )
    )
    message = one_line_error("net.py:build", base_dir=tmp_path)
    assert "calling it raised ValueError: size must be even" in message
    message = one_line_error("net.py:build", {"sise": 2}, base_dir=tmp_path)
    # an argument the function does not take is refused before the call, naming the function's parameters
    assert "build() takes no argument 'sise'; did you mean 'size'? its parameters: size" in message
    assert "'not_a_function' is not callable" in one_line_error("net.py:not_a_function", base_dir=tmp_path)


@pytest.mark.parametrize(
    ("body", "returned"),
    [("return None", "NoneType"), ("return {'model': None}", "dict"), ("return build", "function")],
)
def test_wrong_return_type(tmp_path: Path, body: str, returned: str) -> None:
    (tmp_path / "net.py").write_text(f"def build():\n    {body}\n")
    message = one_line_error("net.py:build", base_dir=tmp_path)
    assert message.endswith(f"returned {returned}, not autotune.Workload; return autotune.Workload(...)")


# --------------------------------------------------------------------------------------- Workload fields
class Block:
    pass


def _parts(**changes: Any) -> dict[str, Any]:
    return {"model": lambda: None, "dataset": lambda: [], "loss": lambda m, b: 0.0, **changes}


def test_workload_defaults() -> None:
    workload = Workload(**_parts())
    assert workload.optimizer is default_optimizer
    assert (workload.base_lr, workload.base_batch_size) == (1e-3, 64)
    assert workload.checkpoint_modules == ()
    assert workload.collate_fn is None and workload.eval_dataset is None
    with pytest.raises(AttributeError):
        workload.base_lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"base_lr": 0}, "Workload.base_lr must be a positive number, got 0"),
        ({"base_lr": -1e-3}, "Workload.base_lr must be a positive number, got -0.001"),
        ({"base_lr": float("nan")}, "Workload.base_lr must be a positive number, got nan"),
        ({"base_lr": "1e-3"}, "Workload.base_lr must be a positive number, got '1e-3'"),
        ({"base_lr": True}, "Workload.base_lr must be a positive number, got True"),
        ({"base_batch_size": 0}, "Workload.base_batch_size must be a positive integer, got 0"),
        ({"base_batch_size": 32.0}, "Workload.base_batch_size must be a positive integer, got 32.0"),
        ({"model": "resnet50"}, "Workload.model must be callable, got str"),
        ({"model": object()}, "Workload.model must be callable, got object"),
        ({"dataset": [1, 2, 3]}, "Workload.dataset must be callable, got list"),
        ({"loss": None}, "Workload.loss must be callable, got NoneType"),
        ({"optimizer": "adamw"}, "Workload.optimizer must be callable, got str"),
        ({"collate_fn": 1}, "Workload.collate_fn must be callable or None, got int"),
        ({"eval_dataset": []}, "Workload.eval_dataset must be callable or None, got list"),
        ({"checkpoint_modules": (Block(),)}, "Workload.checkpoint_modules must hold module types, got"),
        ({"checkpoint_modules": ("Block",)}, "checkpoint_modules must hold module types, got 'Block'"),
    ],
)
def test_workload_field_validation(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        Workload(**_parts(**changes))
    assert message in str(info.value)


def test_checkpoint_modules_normalised_to_a_tuple() -> None:
    assert Workload(**_parts(checkpoint_modules=Block)).checkpoint_modules == (Block,)
    assert Workload(**_parts(checkpoint_modules=[Block])).checkpoint_modules == (Block,)


def test_invalid_workload_from_an_entrypoint_names_the_study(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(
        "import autotune\n\ndef build():\n"
        "    return autotune.Workload(model=None, dataset=lambda: [], loss=lambda m, b: 0.0)\n"
    )
    study = write_study(tmp_path, "net.py:build")
    result = CliRunner().invoke(main, ["validate", str(study)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {study}: workload.entrypoint: Workload.model must be callable, got NoneType"
    ]
