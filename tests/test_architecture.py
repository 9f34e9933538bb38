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
    {"errors", "knobs", "tracebacks", "trial_result", "version", "compat", "scale"},
    {"spec"},
    {"workload"},
    {"workload_check", "workloads"},
    {"search_space"},
    {"trial_runner", "objectives"},
    {"samplers", "pruners"},
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


MAX_FUNCTION_LINES = 80
STRICT_ROOMS = {"trial_runner": 60, "tuner": 60}  # the rank program and the loop are read most: shorter still


def _long_functions() -> list[str]:
    """Every function (a nested one counts within its own lines) over its room's limit, as ``path:name (N lines)``."""
    found = []
    for name, path in _modules():
        room = name.split(".")[1] if "." in name else name
        limit = STRICT_ROOMS.get(room, MAX_FUNCTION_LINES)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.name} ({lines} lines, limit {limit})")
    return found


def _explained_functions() -> set[str]:
    """The functions docs/architecture.md's "Longer functions" list says why they are long (``path:name``)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    section = text.split("## Longer functions", 1)[1].split("\n## ", 1)[0] if "## Longer functions" in text else ""
    return {line.split("`")[1] for line in section.splitlines() if line.startswith("- `")}


def test_functions_are_short_or_the_architecture_doc_says_why() -> None:
    unexplained = [f for f in _long_functions() if f.split(" (")[0] not in _explained_functions()]
    assert not unexplained, "\n".join(unexplained)


def test_package_inits_only_name_public_names() -> None:
    heavy = []
    for name, path in _modules():
        if path.name != "__init__.py" or name == ROOT:
            continue
        tree = ast.parse(path.read_text())
        # a module __getattr__ may name public names imported on first use (trial_runner's, which import torch)
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and not (isinstance(n, ast.FunctionDef) and n.name == "__getattr__" and len(n.body) <= 4)]
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


# Private names of Optuna and torch: reached only through autotune/compat (tests/test_compat.py checks each).
THIRD_PARTY = ("optuna", "torch", "dist", "c10d")  # the libraries and the names their modules go by here
# Optuna objects' private attributes (a study's, a trial's, a storage's, a distribution's), by name.
PRIVATE_ATTRS = {"_storage", "_study_id", "_trial_id", "_cached_frozen_trial", "_backend", "_get_trials", "_contains"}


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")  # torch.__version__ is public


def _private_reaches(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node) or ""
            root = dotted.split(".")[0]
            if node.attr in PRIVATE_ATTRS and root != "self":
                yield node.lineno, dotted or f"._{node.attr}"
            elif root in THIRD_PARTY and any(_private(p) for p in dotted.split(".")[1:]):
                yield node.lineno, dotted
            continue
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("optuna", "torch") and any(_private(p) for p in name.split(".")[1:]):
                yield node.lineno, name


def test_private_internals_of_optuna_and_torch_are_reached_only_through_compat() -> None:
    found = []
    for name, path in _modules():
        if _room(name) == "compat":
            continue
        for line, reached in _private_reaches(ast.parse(path.read_text())):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {reached}")
    assert not found, "reach these through autotune.compat:\n" + "\n".join(sorted(set(found)))


def test_the_private_reach_check_sees_one() -> None:
    planted = ast.parse("import optuna\nstudy._storage.x\nfrom optuna.storages._rdb import models\n"
                        "torch._C._f()\nself._storage = 1\nfrom torch.utils.data import DataLoader\n")
    assert sorted({line for line, _ in _private_reaches(planted)}) == [2, 3, 4]


# benchmarks/ measures the product as a user gets it: public names only (autotune's exports, and
# autotune.compat where a benchmark needs a private name of Optuna or torch). It is not a package, so the
# room checks above do not read it.
BENCHMARKS = PACKAGE.parent / "benchmarks"


NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make"}  # public, underscored not to clash with fields


def _benchmark_reaches(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Optuna's and torch's private names (as in autotune), autotune's private modules and names, another
    object's private attribute, and a private method overridden in a subclass."""
    yield from _private_reaches(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute):
            if (_private(node.attr) and node.attr not in NAMEDTUPLE_API
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                yield node.lineno, _dotted(node) or f"(...).{node.attr}"
            continue
        elif isinstance(node, ast.ClassDef) and node.bases:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(item.name):
                    yield item.lineno, f"{node.name}.{item.name} overrides a private method"
            continue
        else:
            continue
        for name in names:
            if name.split(".")[0] == "autotune" and any(_private(p) for p in name.split(".")[1:]):
                yield node.lineno, name


def test_benchmarks_use_public_names_only() -> None:
    found = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for line, reached in _benchmark_reaches(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {reached}")
    assert not found, ("benchmarks measure the public product: use autotune's exports, or autotune.compat for "
                       "a private name of Optuna or torch:\n" + "\n".join(sorted(set(found))))


def test_the_benchmark_check_sees_each_kind() -> None:
    planted = ast.parse(
        "from autotune.samplers._acquisition import grid_of\n"
        "import autotune.tuner._loop as loop\n"
        "from autotune.tuner import _memory\n"
        "GPSampler._optimize_acqf(s, a, b)\n"
        "class G(PartialGPSampler):\n"
        "    def _optimize_acqf(self, a, b):\n"
        "        return super()._optimize_acqf(a, b)\n"
        "from optuna.storages._rdb import models\n"
        "from autotune.tuner import Tuner\n"
        "self._count += 1\n"
        "from autotune.compat.optuna_private import trials_of\n"
        "from _common import stage\n"
        "class Own:\n"
        "    def _helper(self):\n"
        "        pass\n"
    )
    assert sorted({line for line, _ in _benchmark_reaches(planted)}) == [1, 2, 3, 4, 6, 7, 8]


# The knob table (autotune/knobs.py) drives the rooms: TrialConfig's fields, the study file's search_space keys,
# `--set`, short(), the bottlenecks, DDP's and TrainingArguments' keywords. A knob is then named only in the table
# and where the rank applies it, so adding one touches those two files, its tests and the docs.
KNOB_HOMES = {"autotune/knobs.py", "autotune/trial_runner/_apply.py"}
# A knob's own rule the table does not say, where it lives, and why.
KNOB_RULES = {
    # never with grad_accum above 1 (DDP's no_sync() fails under a static graph, pytorch/pytorch#143580): the
    # config refuses it, the space does not sample it there, the study file and its baseline are checked
    "static_graph": {"autotune/search_space/_config.py", "autotune/search_space/_space.py", "autotune/spec/_study.py"},
}
# Knobs the product reasons about beyond applying them (the batch split, the learning rate, the memory model, the
# input pipeline, compile's payback, the thread count...): named where they mean something. A knob the table
# marks core=True must be added here, which says the table no longer drives it alone.
CORE_KNOBS = {"batch_size", "grad_accum", "lr_scaling", "num_workers", "prefetch_factor", "pin_memory", "amp",
              "activation_checkpointing", "world_size", "threads_per_rank", "compile", "sharding",
              # the mesh: the data-parallel degree, the global batch, the memory model and the rank's build
              "tensor_parallel", "pipeline_parallel", "pipeline_schedule", "pipeline_microbatches"}


def _knob_names(tree: ast.AST, knobs: set[str]) -> Iterator[tuple[int, str]]:
    """Where a knob is spelled: a string, an attribute, a keyword argument, a parameter, a name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            spelled: str | None = node.value
        elif isinstance(node, ast.Attribute):
            spelled = node.attr
        elif isinstance(node, ast.keyword | ast.arg):
            spelled = node.arg
        elif isinstance(node, ast.Name):
            spelled = node.id
        else:
            continue
        if spelled in knobs:
            yield node.lineno, spelled


def test_a_knob_is_named_only_by_the_table_and_where_the_rank_applies_it() -> None:
    from autotune.knobs import KNOBS

    assert {name for name, knob in KNOBS.items() if knob.core} == CORE_KNOBS
    plain = set(KNOBS) - CORE_KNOBS
    found = []
    for _, path in _modules():
        where = path.relative_to(PACKAGE.parent).as_posix()
        if where in KNOB_HOMES:
            continue
        for line, knob in _knob_names(ast.parse(path.read_text()), plain):
            if where not in KNOB_RULES.get(knob, ()):
                found.append(f"{where}:{line}: {knob}")
    assert not found, ("derive these from the knob table (autotune/knobs.py), or apply the knob in "
                       "autotune/trial_runner/_apply.py:\n" + "\n".join(found))


def test_the_knob_check_sees_each_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = ("cfg.static_graph\nkw['bucket_cap_mb']\nDDP(m, gradient_as_bucket_view=True)\n"
               "def f(static_graph): pass\nbucket_cap_mb: int = 25\n'a static_graph in a sentence'\nstatic = 1\n")
    lines = sorted(line for line, _ in _knob_names(ast.parse(planted), {"static_graph", "bucket_cap_mb",
                                                                        "gradient_as_bucket_view"}))
    assert lines == [1, 2, 3, 4, 5]
    fake = tmp_path / "autotune"
    (fake / "calibration").mkdir(parents=True)
    (fake / "calibration" / "_kwargs.py").write_text("def ddp_kwargs(cfg):\n    return {'static_graph': True}\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match=r"autotune/calibration/_kwargs.py:2: static_graph"):
        test_a_knob_is_named_only_by_the_table_and_where_the_rank_applies_it()
