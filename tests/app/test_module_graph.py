"""The server's modules import one another without a cycle, counting the imports made only
for type checking: a cycle hides which module a reader must understand first."""

from __future__ import annotations

import ast
from pathlib import Path

import app

ROOT = Path(app.__file__).parent


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each of the app's modules, with the app's modules it imports anywhere in its body."""
    modules = {module_of(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = {f"{node.module}.{alias.name}" for alias in node.names}
                graph[name].update((named | {node.module}) & modules.keys())
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name in modules)
    for name in graph:
        graph[name].discard(name)
        graph[name].discard("app")  # the package itself holds nothing
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


def test_the_app_has_no_import_cycle() -> None:
    graph = imports()
    assert len(graph) > 50 and graph["app.quota.lanes"] >= {"app.transactions"}
    assert cycle(graph) is None


def test_a_cycle_is_found_where_there_is_one() -> None:
    graph = imports()
    graph["app.transactions"].add("app.quota.lanes")  # lanes import transactions
    assert cycle(graph) == ["app.quota.lanes", "app.transactions", "app.quota.lanes"]
