"""The core's shape, checked from its source: one-way imports between sub-packages,
only exported names across package lines, torch where it belongs, small modules."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "rstar2_async"

# Sub-package -> the sub-packages it may import (top-level modules: types, errors,
# _plugins, _paths, which import no sub-package).  Data-flow order; nothing upward.
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "reward": set(),
    "rollout": {"config", "reward"},
    "selection": {"reward"},
    "learn": {"config"},
    "demo": {"rollout"},
    "recipe": {"config", "reward", "rollout", "selection", "learn", "demo"},
    "view": {"config", "reward", "rollout", "selection", "recipe"},
    "cli": {"config", "reward", "rollout", "selection", "learn", "demo", "recipe", "view"},
    # Doubles and chaos runs for tests and benchmarks: nothing in the core imports them.
    "testing": set(),
}
LEAVES = {"types", "errors", "_plugins", "_paths"}
# Service package -> the top-level packages it must not import (the core may import
# all three; httpgate, both ends of HTTP, is shared by backends and sandbox).
SERVICES_FORBIDDEN: dict[str, set[str]] = {
    "backends": {"rstar2_async", "sandbox"},
    "sandbox": {"rstar2_async", "backends"},
    "httpgate": {"rstar2_async", "backends", "sandbox"},
    "fleetsim": {"rstar2_async", "sandbox"},
}
# openai: its SDK takes 0.5-1 s to import, and only chat-mode evaluation needs it.
HEAVY = ("torch", "deepspeed", "transformers", "openai")
# Where else the heavy libraries may be imported (inside the functions that need them).
HEAVY_ALLOWED = {"rstar2_async/demo/_tinymodel.py", "rstar2_async/recipe/_metrics.py", "rstar2_async/testing/_weights.py"}
# Every tree whose modules import each other, for the cycle check.
TREES = ("rstar2_async", "backends", "sandbox", "httpgate", "fleetsim", "benchmarks", "tests")


def modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def import_statements(path: Path) -> list[tuple[str, list[str]]]:
    """Every import of ``path``, at any depth: the absolute module name and the names
    taken from it (none for a plain ``import``)."""
    package = ".".join(
        path.relative_to(ROOT).with_suffix("").parts[:-1]
        if path.name != "__init__.py"
        else path.relative_to(ROOT).parts[:-1]
    )
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, [a.name for a in node.names]))
    return found


def imports(path: Path) -> list[str]:
    """Absolute names of every module ``path`` imports, at any depth."""
    found = []
    for base, names in import_statements(path):
        found.append(base)
        found += [f"{base}.{name}" for name in names]  # `from pkg import _module`
    return found


def subpackage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "rstar2_async" and len(parts) > 1 else None


def test_subpackages_import_only_downstream_ones() -> None:
    bad = []
    for path in modules(CORE):
        rel = path.relative_to(CORE).parts
        own = rel[0] if len(rel) > 1 else None
        for name in imports(path):
            other = subpackage(name)
            if other is None or other == own or other in LEAVES:
                continue
            if own is None:  # a top-level module imports no sub-package
                if path.name != "__init__.py" or other not in ("errors", "types"):
                    bad.append(f"{path.relative_to(ROOT)} -> {name}")
            elif other not in ALLOWED[own]:
                bad.append(f"{path.relative_to(ROOT)} -> {name}")
    assert bad == []


def test_service_packages_import_one_way() -> None:
    """Checked in the source, so an import inside a function counts too."""
    bad = [
        f"{path.relative_to(ROOT)} -> {name}"
        for package, forbidden in SERVICES_FORBIDDEN.items()
        for path in modules(ROOT / package)
        for name in imports(path)
        if name.split(".")[0] in forbidden
    ]
    assert bad == []


def test_the_allowed_graph_has_no_cycle() -> None:
    seen: dict[str, int] = {}

    def visit(node: str, stack: tuple[str, ...]) -> None:
        assert node not in stack, f"cycle: {' -> '.join((*stack, node))}"
        for dep in ALLOWED[node]:
            visit(dep, (*stack, node))
        seen[node] = 1

    for node in ALLOWED:
        visit(node, ())


def resolve(name: str, importer: Path) -> Path | None:
    """The module file of the tree that ``name`` (as :func:`imports` gives it) names, if any.
    A benchmark script's bare ``_module`` names the module beside it."""
    parts = name.split(".")
    bases = [ROOT, importer.parent] if importer.parent.name == "benchmarks" else [ROOT]
    for base in bases:
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file() and candidate.resolve() != importer:
                return candidate
    return None


@functools.cache
def import_graph() -> dict[Path, set[Path]]:
    """Module -> the modules of the tree it imports, at any depth (``TYPE_CHECKING``
    blocks included: a circle there is a circle in the design)."""
    graph: dict[Path, set[Path]] = {}
    for tree in TREES:
        for path in modules(ROOT / tree):
            targets = set()
            for base, names in import_statements(path):
                # `from pkg import _module` imports the module; `from pkg import name`, the package.
                found = [resolve(f"{base}.{name}", path) or resolve(base, path) for name in names] or [resolve(base, path)]
                targets |= {t for t in found if t is not None}
            graph[path] = targets
    return graph


def test_no_import_circle_anywhere_in_the_tree() -> None:
    """Tarjan's strongly connected components over every module of every tree."""
    graph = import_graph()
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    circles: list[list[str]] = []

    def connect(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(str(member.relative_to(ROOT)))
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in graph:
        if node not in index:
            connect(node)
    assert circles == []


def test_tests_and_benchmarks_do_not_import_each_other() -> None:
    """What both use lives in a shipped package (``rstar2_async.testing``, ``fleetsim``)."""
    graph = import_graph()
    bad = [
        f"{a.relative_to(ROOT)} -> {b.relative_to(ROOT)}"
        for a, targets in graph.items()
        for b in targets
        if {a.relative_to(ROOT).parts[0], b.relative_to(ROOT).parts[0]} == {"tests", "benchmarks"}
    ]
    assert bad == []


def test_only_exported_names_cross_package_lines() -> None:
    """No module imports another package's private module: the core, the CLI and the
    benchmarks use what ``backends``, ``sandbox`` and each sub-package export."""
    bad = []
    for path in (
        modules(CORE)
        + modules(ROOT / "benchmarks")
        + modules(ROOT / "backends")
        + modules(ROOT / "sandbox")
        + modules(ROOT / "httpgate")
        + modules(ROOT / "fleetsim")
    ):
        here = ".".join(path.relative_to(ROOT).parts[:2])
        for name in imports(path):
            parts = name.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
            if private is None or private == 0:
                continue
            owner = ".".join(parts[:private])  # the package whose private module this is
            if not (here == owner or here.startswith(owner + ".") or (owner + ".").startswith(here + ".")):
                bad.append(f"{path.relative_to(ROOT)} -> {name}")
    assert bad == []


def test_only_the_learner_imports_torch() -> None:
    bad = []
    for path in modules(CORE):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("rstar2_async/learn/") or rel in HEAVY_ALLOWED:
            continue
        bad += [f"{rel} -> {n}" for n in imports(path) if n.split(".")[0] in HEAVY]
    assert bad == []


@pytest.mark.parametrize(
    "packages",
    [
        "rstar2_async",
        "rstar2_async.rollout",
        "rstar2_async.reward, rstar2_async.selection, rstar2_async.recipe",
        "rstar2_async.config, rstar2_async.demo, rstar2_async.cli.main, rstar2_async.view",
    ],
)
def test_importing_the_core_imports_no_heavy_library(packages: str) -> None:
    code = f"import sys, {packages}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_no_module_of_the_core_or_its_services_is_over_400_lines() -> None:
    packages = [CORE] + [ROOT / name for name in ("backends", "sandbox", "httpgate", "fleetsim")]
    long = {
        str(p.relative_to(ROOT)): n
        for root in packages
        for p in modules(root)
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}
