"""No function of the server or of rgspark is longer than a screen (60 lines, its
decorators and docstring included): a longer one holds steps that want names of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import app

LONGEST = 60
ROOTS = [Path(app.__file__).parent, Path(app.__file__).parents[1] / "spark" / "rgspark"]


def lengths(source: str) -> dict[str, int]:
    """Each function of ``source`` (methods and nested ones too), by name, with its length
    in lines."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[f"{node.name}:{node.lineno}"] = (node.end_lineno or node.lineno) - first + 1
    return found


def test_no_function_is_longer_than_a_screen() -> None:
    paths = [path for root in ROOTS for path in sorted(root.rglob("*.py"))]
    assert len(paths) > 50  # both packages were found
    long = {
        f"{path}:{name}": length
        for path in paths
        for name, length in lengths(path.read_text()).items()
        if length > LONGEST
    }
    assert long == {}


def test_a_function_is_measured_from_its_first_decorator_to_its_last_line() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = f"@decorator\ndef long():\n{body}\n\ndef short():\n    pass\n"
    assert lengths(source) == {"long:2": 62, "short:64": 2}
