"""The package's layers, read from its source: no cycles, no private imports.

Every import in ``src/gpuguide`` counts, also those inside functions and under
``TYPE_CHECKING``. The rules: foundation modules import nothing else from
gpuguide; core modules do not import the chapter helpers; no module imports
another module's private names (``_name``), directly or as an attribute of a
module it imported; and the imports form no cycle. Each rule is also checked
against a small package that breaks it, so these tests can fail.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import gpuguide

SRC = ROOT / "src"
FOUNDATION = {"env", "host", "units", "checks", "quiet", "version"}
#: Programs on top of everything, imported by none: ``python -m gpuguide``, which
#: runs the check-up of the sibling package gpuguide_tools.
PROGRAMS = {"__main__"}


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(src: Path, package: str) -> dict[str, Path]:
    root = src / package
    return {_module_name(p, src): p for p in sorted(root.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a (possibly relative) ``from`` import's module."""
    if level == 0:
        return target or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _analyse(
    src: Path, package: str
) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Import graph between the package's modules, and private names used across."""
    modules = _modules(src, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private: list[tuple[str, str]] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}  # local name -> package module it refers to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        graph[name].add(alias.name)
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                origin = _resolve(name, is_package, node.level, node.module)
                if origin not in modules:
                    continue
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    if sub in modules:  # a module imported from its package
                        graph[name].add(sub)
                        aliases[alias.asname or alias.name] = sub
                    else:
                        graph[name].add(origin)
                        if _is_private(alias.name) and origin != name:
                            private.append((name, f"{origin}.{alias.name}"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _is_private(node.attr)
                and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id, name) != name
            ):
                private.append((name, f"{aliases[node.value.id]}.{node.attr}"))
    for name in graph:
        graph[name].discard(name)
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle found by a depth-first search, each once."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "chapters":
        return "chapters"
    if len(parts) == 1:
        return "package"
    if parts[1] in PROGRAMS:
        return "programs"
    return "foundation" if parts[1] in FOUNDATION else "core"


def _layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    allowed = {
        "foundation": set(),
        "core": {"foundation", "core"},
        "chapters": {"foundation", "core", "chapters"},
        "package": {"foundation", "core"},
        "programs": {"foundation", "core", "chapters", "programs"},
    }
    return [
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if _layer(target) not in allowed[_layer(module)]
    ]


@pytest.fixture(scope="module")
def analysis():
    return _analyse(SRC, "gpuguide")


def test_the_package_has_its_layers(analysis):
    graph, _ = analysis
    layers = {_layer(m) for m in graph}
    assert layers == {"package", "foundation", "core", "chapters", "programs"}
    assert {m.split(".")[1] for m in graph if _layer(m) == "foundation"} == FOUNDATION


def test_no_import_cycles(analysis):
    graph, _ = analysis
    assert _cycles(graph) == []


def test_no_private_names_imported_from_another_module(analysis):
    _, private = analysis
    assert private == []


def test_layers_import_in_one_direction(analysis):
    graph, _ = analysis
    assert _layer_violations(graph) == []


def test_spawned_targets_live_in_importable_modules(analysis):
    graph, _ = analysis
    assert "gpuguide.chapters.distributed" in graph
    assert "gpuguide.chapters.data" in graph
    from gpuguide.chapters.data import SyntheticImages
    from gpuguide.chapters.distributed import ddp_train_worker

    assert ddp_train_worker.__module__ == "gpuguide.chapters.distributed"
    assert SyntheticImages.__module__ == "gpuguide.chapters.data"


def _imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_only_python_m_gpuguide_reaches_the_programs_beside_the_helpers():
    # What a page imports never loads the recorder or the check-up; gpuguide.diagnose
    # loads the diagnosis when it is called (test_importing_gpuguide_loads_no_program).
    reaching = sorted(
        name
        for name, path in _modules(SRC, "gpuguide").items()
        if any(m.split(".")[0] == "gpuguide_tools" for m in _imports_of(path))
    )
    assert reaching == ["gpuguide", "gpuguide.__main__"]
    package = (SRC / "gpuguide" / "__init__.py").read_text()
    top = ast.parse(package).body
    assert not any(
        isinstance(n, ast.Import | ast.ImportFrom)
        and "gpuguide_tools" in ast.unparse(n)
        for n in top
    )
    tools = _modules(SRC, "gpuguide_tools")
    assert {"gpuguide_tools.checkup", "gpuguide_tools.recorder"} <= set(tools)


def test_importing_gpuguide_loads_no_program():
    code = "import sys, gpuguide; print([m for m in sys.modules if 'gpuguide_' in m])"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_top_level_exports_only_the_core():
    for name in gpuguide.__all__:
        if name in {"__version__", "diagnose"}:  # diagnose: a door to the program
            continue
        module = getattr(gpuguide, name).__module__
        assert _layer(module) in {"foundation", "core"}, (name, module)


# -- the checks themselves find what they look for ----------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path, "pkg"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    src, name = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import f\n",
            "b.py": "def f():\n    from pkg import c\n",
            "c.py": "from . import a\n",
        },
    )
    graph, _ = _analyse(src, name)
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_private_imports_are_found_in_both_spellings(tmp_path):
    src, name = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def _hidden():\n    pass\n_X = 1\n",
            "b.py": "from pkg.a import _hidden\n",
            "c.py": "from pkg import a\n\ndef g():\n    return a._X\n",
            "d.py": "from pkg.a import __name__ as n\n_own = 1\nprint(_own)\n",
        },
    )
    _, private = _analyse(src, name)
    assert sorted(private) == [("pkg.b", "pkg.a._hidden"), ("pkg.c", "pkg.a._X")]


def test_a_foundation_module_that_imports_the_core_breaks_the_layers():
    graph = {
        "gpuguide.env": {"gpuguide.timing"},
        "gpuguide.timing": {"gpuguide.chapters.data"},
        "gpuguide.chapters.data": {"gpuguide.timing"},
    }
    assert _layer_violations(graph) == [
        ("gpuguide.env", "gpuguide.timing"),
        ("gpuguide.timing", "gpuguide.chapters.data"),
    ]
