"""Every import is declared in pyproject.toml, and the defaults run with the runtime dependencies alone.

This machine's global Python (and CI's test environment, with its extras) has packages a user's fresh
virtual environment lacks. Two checks catch an undeclared dependency wherever it is installed:

- every import in autotune/, tests/, benchmarks/ and studies/ names a declared distribution (autotune's
  module-level imports: a runtime dependency; imports inside functions, tests and benchmarks: an extra);
- in a subprocess whose importer refuses every module outside autotune's runtime dependency closure
  (what ``pip install -e .`` installs), every autotune module imports and the default sampler and pruner
  of a study file run a real study for long enough to load what they load lazily (GPSampler: scipy).
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _norm(re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0])


RUNTIME = {_requirement_name(r) for r in PYPROJECT["dependencies"]}
EXTRAS = {_requirement_name(r) for reqs in PYPROJECT["optional-dependencies"].values() for r in reqs}
DISTRIBUTIONS = {module: [_norm(d) for d in dists] for module, dists in metadata.packages_distributions().items()}
# The project's own folders, and its files imported by their names (workload files beside a study, a
# benchmark's helper module).
LOCAL = {"autotune", "tests", "benchmarks", "studies"} | {
    path.stem for folder in ("tests", "benchmarks", "studies") for path in (ROOT / folder).rglob("*.py")
}


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, imported at module level) for every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try | ast.If)
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], top))
            visit(child, nested)

    visit(tree, True)
    return found


def _third_party(module: str) -> bool:
    return module not in sys.stdlib_module_names and module not in LOCAL and not module.startswith("_")


def _undeclared(folder: str, *, runtime_only_at_top: bool) -> list[str]:
    problems = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module, top in _imports(path):
            if not _third_party(module):
                continue
            dists = DISTRIBUTIONS.get(module, [_norm(module)])
            allowed = RUNTIME if (runtime_only_at_top and top) else RUNTIME | EXTRAS
            if not any(d in allowed for d in dists):
                where = "dependencies" if (runtime_only_at_top and top) else "dependencies or an extra"
                problems.append(f"{path.relative_to(ROOT)}: import {module} ({'/'.join(dists)}) is not in {where}")
    return sorted(set(problems))


def test_autotune_module_level_imports_are_runtime_dependencies() -> None:
    assert _undeclared("autotune", runtime_only_at_top=True) == []


def test_tests_benchmarks_and_studies_import_only_declared_packages() -> None:
    problems = [p for folder in ("tests", "benchmarks", "studies") for p in
                _undeclared(folder, runtime_only_at_top=False)]
    assert problems == []


def test_the_finder_sees_an_undeclared_import(tmp_path: Path) -> None:
    # The check above cannot pass vacuously: a file importing something undeclared is reported.
    sample = tmp_path / "sample.py"
    sample.write_text("import optuna\nimport jsonschema_nowhere\n\ndef f():\n    import scipy\n")
    found = _imports(sample)
    assert ("optuna", True) in found and ("jsonschema_nowhere", True) in found and ("scipy", False) in found


def _runtime_closure() -> set[str]:
    """The distributions ``pip install -e .`` installs: autotune's dependencies, recursively, no extras."""
    seen: set[str] = set()
    todo = sorted(RUNTIME)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            spec, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            if marker.strip():
                from packaging.markers import Marker

                if not Marker(marker).evaluate():
                    continue
            todo.append(_requirement_name(spec))
    return seen


CHECK = textwrap.dedent(
    """
    import importlib, importlib.abc, importlib.metadata, pkgutil, re, sys

    allowed = set(sys.argv[1].split(","))
    owners = {m: {re.sub(r"[-_.]+", "-", d).lower() for d in ds}
              for m, ds in importlib.metadata.packages_distributions().items()}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in owners and top != "autotune" and not owners[top] & allowed:
                raise ModuleNotFoundError(f"No module named {name!r} (not a runtime dependency of autotune)")
            return None

    sys.meta_path.insert(0, Refuse())

    import autotune
    for info in pkgutil.walk_packages(autotune.__path__, "autotune."):
        importlib.import_module(info.name)

    import optuna
    from autotune.search_space import study_space
    from autotune.spec import parse_spec
    from autotune.pruners import make_pruner
    from autotune.samplers import make_sampler

    spec = parse_spec({"name": "deps", "workload": {"entrypoint": "autotune.workloads.mlp:build"},
                       "search_space": {"batch_size": {"low": 16, "high": 256, "log": True},
                                        "num_workers": {"low": 0, "high": 2}}})
    space = study_space(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec, space), pruner=make_pruner(spec))
    for _ in range(12):
        trial = study.ask()
        config = space.suggest(trial)
        study.tell(trial, float(config.batch_size) / (1 + config.num_workers))
    inner = getattr(study.sampler, "inner", study.sampler)  # the study file's sampler, inside the no-repeat wrapper
    print("ok", type(inner).__name__, type(study.pruner).__name__, len(study.trials))
    """
)


def test_every_module_and_the_default_search_run_on_runtime_dependencies_alone() -> None:
    closure = _runtime_closure()
    assert {"optuna", "torch", "scipy"} <= closure
    out = subprocess.run(
        [sys.executable, "-c", CHECK, ",".join(sorted(closure))],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[:2] == ["ok", "PartialGPSampler"], out.stdout


def test_the_refusing_importer_refuses_what_is_not_declared() -> None:
    # Without scipy among the allowed distributions, the default sampler's search fails to import it:
    # the check above would catch scipy going missing from `dependencies` again.
    closure = _runtime_closure() - {"scipy"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK, ",".join(sorted(closure))],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )
    assert out.returncode != 0
    assert "scipy" in out.stderr
