"""What the test suite needs from the machine, checked once before any test runs.

Without PostgreSQL every API test would fail on its own fixture, without Java every Spark
test on its own session, and without Chromium every browser test: dozens of errors (or skips)
that all say one thing. The run stops instead with one line naming what is missing, and how
to deselect the tests that need it. Only what the collected tests need is checked (their
markers, set by `mark`), so that ``make test-fast`` runs on a machine with none of the three.
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
CHROMIUM = Path(os.environ.get("RG_TEST_CHROMIUM", "/usr/bin/chromium"))
"""Debian's build, which the browser tests drive (Playwright never downloads one)."""


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


def chromium_problem(chromium: Path = CHROMIUM) -> str | None:
    """Why the browser tests cannot start a browser, or None."""
    if os.access(chromium, os.X_OK):
        return None
    return (
        f"Chromium is missing: the browser tests drive {chromium} (apt-get install chromium, "
        "or set RG_TEST_CHROMIUM), or deselect them with -m 'not browser'"
    )


def mark(item: pytest.Item) -> None:
    """Mark a test with what it needs of the machine: ``spark`` (Java) where it runs a Spark
    session, ``browser`` where it drives Chromium, ``postgresql`` where it runs on the test
    PostgreSQL (the database fixture's, or a ``backend`` parameter's; a test that makes its
    own database is marked where it is written)."""
    fixtures = getattr(item, "fixturenames", ())
    if "spark" in fixtures:
        item.add_marker(pytest.mark.spark)
    if "browser" in fixtures:
        item.add_marker(pytest.mark.browser)
    callspec = getattr(item, "callspec", None)
    params = {} if callspec is None else callspec.params
    if "postgresql" in (params.get("database_url"), params.get("backend")):
        item.add_marker(pytest.mark.postgresql)


def needs(items: Iterable[pytest.Item], marker: str) -> bool:
    return any(item.get_closest_marker(marker) is not None for item in items)


def check(session: pytest.Session, postgres_url: str) -> None:
    """Stop the run, in one line, when the collected tests need what the machine lacks."""
    if session.config.option.collectonly or not session.items:
        return
    checks = (
        ("postgresql", lambda: postgres_problem(postgres_url)),
        ("spark", java_problem),
        ("browser", chromium_problem),
    )
    problems = [problem() for marker, problem in checks if needs(session.items, marker)]
    missing = [problem for problem in problems if problem]
    if missing:
        pytest.exit("; ".join(missing), returncode=pytest.ExitCode.USAGE_ERROR)
