"""The server's modules and rgspark's import one another without a cycle, counting the
imports made only for type checking or inside a function: a cycle hides which module a
reader must understand first."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import pytest

import app
import rgspark


def module_of(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.ImportFrom, package: str) -> str:
    """The module an ``import from`` names, relative ones resolved from ``package``."""
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports(package: ModuleType) -> dict[str, set[str]]:
    """Each of the package's modules, with the package's modules it imports anywhere in its
    body."""
    root = Path(package.__file__ or "").parent
    modules = {module_of(root, path): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        home = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = imported(node, home)
                named = {f"{module}.{alias.name}" for alias in node.names}
                graph[name].update((named | {module}) & modules.keys())
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name in modules)
    for name in graph:
        graph[name].discard(name)
        graph[name].discard(package.__name__)  # the package itself holds nothing
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it, or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for imported in sorted(graph[name]):
            found = visit(imported, [*path, name])
            if found:
                return found
        done.add(name)
        return None

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return None


@pytest.mark.parametrize("package", [app, rgspark], ids=["app", "rgspark"])
def test_a_package_has_no_import_cycle(package: ModuleType) -> None:
    graph = imports(package)
    assert len(graph) > 20 and cycle(graph) is None


def test_imports_are_read_relative_and_absolute() -> None:
    assert imports(app)["app.quota.lanes"] >= {"app.transactions"}
    # ``from ._session import ...`` inside a function of rgspark._client
    assert imports(rgspark)["rgspark._client"] >= {"rgspark._session", "rgspark.wire"}


def test_a_cycle_is_found_where_there_is_one() -> None:
    graph = imports(app)
    graph["app.transactions"].add("app.quota.lanes")  # lanes import transactions
    assert cycle(graph) == ["app.quota.lanes", "app.transactions", "app.quota.lanes"]
