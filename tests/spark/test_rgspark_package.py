"""The public surface of rgspark: its names, its exception tree, its dependencies, its version
and the import structure of its modules."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import rgspark
from rgspark import _exceptions


def test_all_names_exist_and_present_themselves_as_public() -> None:
    for name in rgspark.__all__:
        obj = getattr(rgspark, name)
        if isinstance(obj, type):
            assert obj.__module__ == "rgspark", name


@pytest.mark.parametrize(
    ("error", "parents"),
    [
        (rgspark.ConfigurationError, (rgspark.RGSparkError, ValueError)),
        (rgspark.AdminServerError, (rgspark.RGSparkError,)),
        (rgspark.ServerUnreachableError, (rgspark.AdminServerError,)),
        (rgspark.AuthenticationError, (rgspark.AdminServerError,)),
        (rgspark.PermissionDeniedError, (rgspark.AdminServerError,)),
        (rgspark.NamespaceNotFoundError, (rgspark.AdminServerError,)),
        (rgspark.UnexpectedResponseError, (rgspark.AdminServerError,)),
        (rgspark.PolicyUnavailableError, (rgspark.RGSparkError,)),
    ],
)
def test_exception_tree(error: type[Exception], parents: tuple[type[Exception], ...]) -> None:
    assert issubclass(error, parents)
    # The tree drawn in the module's docstring names every class.
    assert error.__name__ in (_exceptions.__doc__ or "")


def test_admin_server_errors_carry_the_answer() -> None:
    error = rgspark.NamespaceNotFoundError(
        "namespace t/ns does not exist", status_code=404, reason="Namespace does not exist"
    )
    assert str(error) == "namespace t/ns does not exist"
    assert (error.status_code, error.reason) == (404, "Namespace does not exist")
    assert rgspark.ServerUnreachableError("refused").status_code is None


def test_import_pulls_in_no_server_and_no_spark() -> None:
    # Executors get rgspark as a zip, with nothing of the server installed; and importing it
    # must stay cheap: PySpark and PyArrow are imported by the Spark helpers when called.
    code = (
        "import sys; before = set(sys.modules); import rgspark; "
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    assert "httpx" in loaded
    heavy = {
        "app",
        "fastapi",
        "starlette",
        "sqlalchemy",
        "pydantic",
        "pyspark",
        "pyarrow",
        "pandas",
    }
    assert loaded & heavy == set()


# ---------------------------------------------------------------------------------------------
# The version

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spark" / "rgspark"


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as source:
        version: str = tomllib.load(source)["project"]["version"]
    return version


def version_in_fresh_python(setup: str, path: str | None = None) -> str:
    """``rgspark.__version__`` in a new interpreter, after `setup` ran there; `path` first
    on its ``sys.path`` when given (a zip of the package, say)."""
    code = (
        f"import sys; sys.path.insert(0, {path!r}) if {path!r} else None; {setup}; "
        "import rgspark; print(rgspark.__version__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return done.stdout.strip()


# Makes the installed distribution invisible, as on an executor that has only a zip of
# rgspark or in a checkout that was never installed.
NOT_INSTALLED = (
    "import importlib.metadata as m; "
    "m.version = lambda name: (_ for _ in ()).throw(m.PackageNotFoundError(name))"
)


def test_the_version_is_the_installed_distributions() -> None:
    assert rgspark.__version__ == metadata.version("resourcegroups-spark")
    assert rgspark.__version__ == project_version()  # this checkout is what is installed
    from rgspark import __version__

    assert __version__ == rgspark.__version__


def test_a_checkout_that_is_not_installed_reads_its_pyproject() -> None:
    assert version_in_fresh_python(NOT_INSTALLED) == project_version()


def test_a_zip_without_the_distribution_says_its_version_is_unknown(tmp_path: Path) -> None:
    archive = tmp_path / "rgspark.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for source in PACKAGE.glob("*.py"):
            out.write(source, f"rgspark/{source.name}")
    assert version_in_fresh_python(NOT_INSTALLED, str(archive)) == "0+unknown"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ('[project]\nname = "resourcegroups-spark"\nversion = "1.2.3"\n', "1.2.3"),
        (
            '[build-system]\nversion = "9"\n[project]\nversion = "2.0"\n'
            'name = "resourcegroups-spark"\n[tool.x]\nversion = "8"\n',
            "2.0",
        ),
        ('[project]\nname = "another"\nversion = "1.0"\n', None),
        ('[tool.x]\nname = "resourcegroups-spark"\nversion = "1.0"\n', None),
        ('[project]\nname = "resourcegroups-spark"\ndynamic = ["version"]\n', None),
    ],
)
def test_a_checkouts_version_comes_from_its_project_table(
    tmp_path: Path, text: str, version: str | None
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text)
    assert rgspark._checkout_version(pyproject) == version
    assert rgspark._checkout_version(tmp_path / "missing.toml") is None


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        rgspark.nothing  # noqa: B018


# ---------------------------------------------------------------------------------------------
# Import structure


MODULES = sorted(f"rgspark.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=ROOT)


def module_imports(package: Path, name: str) -> dict[str, set[str]]:
    """The package's modules, each with the package's modules it imports when loaded or
    type-checked: statements outside functions, ``if TYPE_CHECKING:`` and class bodies
    included. (An import inside a function runs on its call, later: it closes no cycle at
    load.)"""
    graph = {}
    for source in package.glob("*.py"):
        module = name if source.stem == "__init__" else f"{name}.{source.stem}"
        graph[module] = set(_imported(ast.parse(source.read_text()).body, name, package))
    return graph


def _imported(body: list[ast.stmt], name: str, package: Path) -> Iterator[str]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == name)
        elif isinstance(node, ast.ImportFrom):
            base = name if node.level else node.module or ""
            if node.level and node.module:
                base = f"{name}.{node.module}"
            if base.split(".")[0] != name:
                continue
            if base != name:
                yield base
                continue
            # `from . import wire` imports a module; `from rgspark import X`, the package's X.
            for alias in node.names:
                module = (package / f"{alias.name}.py").exists()
                yield f"{name}.{alias.name}" if module else name
        else:
            for field in ("body", "orelse", "handlers", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _imported(inner, name, package)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle of `graph`, as the path that closes it (found by depth-first search)."""
    found: list[list[str]] = []
    state: dict[str, str] = {}  # "open" while on the path, "done" once explored

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_no_module_of_rgspark_imports_one_that_imports_it_back() -> None:
    graph = module_imports(PACKAGE, "rgspark")
    assert set(graph) == {"rgspark", *MODULES}
    assert "rgspark._checks" in graph["rgspark._client"]  # the graph sees the real imports
    # The package's front door imports the modules; none of them imports it back.
    assert [cycle for cycle in cycles(graph)] == []


def test_the_cycle_check_sees_a_cycle_closed_under_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from ._a import A\n")
    (package / "_a.py").write_text("from . import _b\n\nclass A:\n    from ._c import C\n")
    (package / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import A\n"
    )
    (package / "_c.py").write_text("def f():\n    from pkg import A\n")
    (package / "_d.py").write_text("from pkg import A\n")
    graph = module_imports(package, "pkg")
    assert graph == {
        "pkg": {"pkg._a"},
        "pkg._a": {"pkg._b", "pkg._c"},
        "pkg._b": {"pkg._a"},
        "pkg._c": set(),
        "pkg._d": {"pkg"},
    }
    assert cycles(graph) == [["pkg._a", "pkg._b", "pkg._a"]]
    (package / "_c.py").write_text("from pkg import A\n")  # at load: back to the package
    assert cycles(module_imports(package, "pkg")) == [
        ["pkg._a", "pkg._b", "pkg._a"],
        ["pkg", "pkg._a", "pkg._c", "pkg"],
    ]
