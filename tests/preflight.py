"""What the test suite needs from the machine, checked once before any test runs.

Without PostgreSQL every API test would fail on its own fixture, and without Java every Spark
test on its own session: dozens of errors that all say one thing. The run stops instead with
one line naming what is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import make_url

CONNECT_TIMEOUT_S = 3


def postgres_problem(url: str) -> str | None:
    """Why the test PostgreSQL cannot be used, or None when it answers."""
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S):
            return None
    except psycopg.Error as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        reason = str(exc).strip().partition("\n")[0]
        return (
            f"PostgreSQL does not answer at {shown} ({reason}): start it, or point "
            "RG_TEST_POSTGRES_URL at one"
        )


def java_problem(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why Spark cannot start a JVM, or None; found as PySpark finds it: $JAVA_HOME/bin/java,
    else java on the PATH."""
    java_home = environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home, "bin", "java")
        if os.access(java, os.X_OK):
            return None
        return f"Java is missing: JAVA_HOME={java_home} has no bin/java (the Spark tests need it)"
    if shutil.which("java", path=environ.get("PATH")) is None:
        return (
            "Java is missing: the Spark tests need java on the PATH or JAVA_HOME set "
            "(or deselect them with -m 'not spark')"
        )
    return None


def needs_java(items: Iterable[pytest.Item]) -> bool:
    return any(
        item.get_closest_marker("spark") is not None or "spark" in getattr(item, "fixturenames", ())
        for item in items
    )


def check(session: pytest.Session, postgres_url: str) -> None:
    """Stop the run, in one line, when the collected tests need what the machine lacks."""
    if session.config.option.collectonly or not session.items:
        return
    problems = [postgres_problem(postgres_url)]
    if needs_java(session.items):
        problems.append(java_problem())
    missing = [problem for problem in problems if problem]
    if missing:
        pytest.exit("; ".join(missing), returncode=pytest.ExitCode.USAGE_ERROR)
