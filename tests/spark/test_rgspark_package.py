"""The public surface of rgspark: its names, its exception tree, its dependencies."""

from __future__ import annotations

import subprocess
import sys

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
