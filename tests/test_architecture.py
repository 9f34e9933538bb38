"""The import graph read from the code: one-way layers, no cycle, no private name across packages, short modules.

docs/architecture.md draws the same picture. A trial's data walks one way — study file -> spec ->
search space -> launcher -> rank -> result -> objectives -> tuner -> report/CLI — and each room may
import only the rooms below it. Every import counts, also those inside functions and under
TYPE_CHECKING: an import deferred into a function is still a dependency, only a hidden one.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"

# Rooms from the bottom up. A room may import rooms in lower layers only; rooms in one layer are
# peers and may not import each other (the runner and the objectives, the tuner and the report).
LAYERS: list[set[str]] = [
    {"errors", "knobs", "tracebacks", "trial_result", "version"},
    {"spec"},
    {"workload"},
    {"workload_check", "broken_workload", "workloads"},
    {"search_space"},
    {"trial_runner", "objectives"},
    {"tuner", "report"},
    {"calibration"},
    {"cli"},
]
ROOT = "autotune"  # the package's __init__: the public names, re-exported from the rooms below

MAX_LINES = 350
SIZE_REASON = "Longer than 350 lines because"  # the sentence a longer module opens its docstring with


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def _imports(name: str, path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every autotune import anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "autotune" or target.startswith("autotune."):
                yield target, [alias.name for alias in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "autotune" or alias.name.startswith("autotune."):
                    yield alias.name, [], node.lineno


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _layer(room: str) -> int:
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise AssertionError(f"autotune.{room} is in no layer of tests/test_architecture.py: "
                         "place it there and in docs/architecture.md")


def test_every_room_has_a_layer() -> None:
    rooms = {_room(name) for name, _ in _modules()} - {ROOT}
    for room in sorted(rooms):
        _layer(room)
    # and no layer names a room that no longer exists
    assert set().union(*LAYERS) <= rooms, sorted(set().union(*LAYERS) - rooms)


def test_imports_go_down_only() -> None:
    wrong = []
    for name, path in _modules():
        room = _room(name)
        for target, _names, line in _imports(name, path):
            other = _room(target)
            if other == room:
                continue
            if room == ROOT:
                continue  # the root re-exports; nothing below imports the root (next check)
            if other == ROOT:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports the package root; import the room")
            elif _layer(other) >= _layer(room):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({room}) imports {target} ({other}), "
                             "which is not below it")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_across_rooms() -> None:
    wrong = []
    for name, path in _modules():
        room = _room(name)
        for target, names, line in _imports(name, path):
            if _room(target) == room:
                continue
            private_module = any(part.startswith("_") for part in target.split(".")[1:])
            private_names = [n for n in names if n.startswith("_") and not n.endswith("__")]
            if private_module or private_names:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} {private_names or ''}")
    assert not wrong, "\n".join(wrong)


def test_no_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    known = {name for name, _ in _modules()}
    for name, path in _modules():
        edges = graph.setdefault(name, set())
        for target, names, _line in _imports(name, path):
            # `from autotune.pkg import sub` names a submodule when one exists
            subs = {f"{target}.{n}" for n in names if f"{target}.{n}" in known}
            edges.update(subs or ({target} if target in known else set()))
    for name in graph:  # a package's __init__ is the parent of its modules, not a dependency of them
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt):], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_modules_are_short_or_say_why() -> None:
    long = []
    for _name, path in _modules():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if SIZE_REASON not in doc:
                long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not long, "\n".join(long)


def test_package_inits_only_name_public_names() -> None:
    heavy = []
    for name, path in _modules():
        if path.name != "__init__.py" or name == ROOT:
            continue
        tree = ast.parse(path.read_text())
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        if defs or len(path.read_text().splitlines()) > 80:
            heavy.append(f"{path.relative_to(PACKAGE.parent)}: an __init__ names the room's public names; "
                         "code lives in its modules")
    assert not heavy, "\n".join(heavy)


def test_the_checks_see_a_wrong_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above read real files; here a planted upward import and a planted cycle are caught."""
    fake = tmp_path / "autotune"
    (fake / "spec").mkdir(parents=True)
    (fake / "cli").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "spec" / "__init__.py").write_text("from autotune.cli import main\n")
    (fake / "cli" / "__init__.py").write_text("from autotune.spec import _load\n\ndef main():\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match=r"\(spec\) imports autotune.cli"):
        test_imports_go_down_only()
    with pytest.raises(AssertionError, match="_load"):
        test_no_private_name_across_rooms()
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_cycle_between_modules()
    with pytest.raises(AssertionError, match="code lives in its modules"):
        test_package_inits_only_name_public_names()


def test_docs_draw_the_same_layers() -> None:
    """docs/architecture.md's table names each room at the layer this test enforces."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    drawn: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            for room in cells[1].split(","):
                drawn[room.strip().strip("`").rstrip("/")] = int(cells[0])
    enforced = {room: index for index, rooms in enumerate(LAYERS) for room in rooms}
    assert drawn == enforced
