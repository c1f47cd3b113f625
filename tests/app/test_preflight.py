"""The test run stops before any test, in one line naming what is missing, when the tests it
collected need PostgreSQL, Java (the Spark tests) or Chromium (the browser tests) and the
machine lacks it; each checked here by running pytest itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
UNIT_TESTS = "tests/app/test_outage_log.py"  # quick, and needing none of the three
DATABASE_TESTS = "tests/app/test_default_group.py"  # each on SQLite and on PostgreSQL
SPARK_TESTS = "tests/spark/test_py_files.py"
BROWSER_TESTS = "tests/ui/test_dashboard.py"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # free again once closed: nothing listens there


def pytest_run(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ)
    for key, value in env.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def problem_lines(completed: subprocess.CompletedProcess[str], words: str) -> list[str]:
    output = completed.stdout + completed.stderr
    assert "ERROR" not in output
    assert " passed" not in output
    return [line for line in output.splitlines() if words in line]


def test_no_postgresql_is_one_line() -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/test"
    completed = pytest_run(DATABASE_TESTS, RG_TEST_POSTGRES_URL=url)
    assert completed.returncode == 4
    (line,) = problem_lines(completed, "PostgreSQL")
    assert f"PostgreSQL does not answer at {url}" in line
    assert "RG_TEST_POSTGRES_URL" in line


def test_no_java_is_one_line_when_spark_tests_run() -> None:
    no_java = str(Path(sys.executable).parent)  # this virtualenv's bin: python, no java
    completed = pytest_run(SPARK_TESTS, PATH=no_java, JAVA_HOME=None)
    assert completed.returncode == 4
    (line,) = problem_lines(completed, "Java")
    assert "Java is missing" in line
    assert "-m 'not spark'" in line


def test_a_java_home_without_java_is_named(tmp_path: Path) -> None:
    completed = pytest_run(SPARK_TESTS, JAVA_HOME=str(tmp_path))
    assert completed.returncode == 4
    (line,) = problem_lines(completed, "Java")
    assert f"JAVA_HOME={tmp_path} has no bin/java" in line


def test_tests_that_need_no_java_run_without_it() -> None:
    no_java = str(Path(sys.executable).parent)
    completed = pytest_run(UNIT_TESTS, "-q", PATH=no_java, JAVA_HOME=None)
    assert completed.returncode == 0, completed.stdout
    assert "Java" not in completed.stdout


def test_the_sqlite_half_runs_without_postgresql() -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/test"
    completed = pytest_run(DATABASE_TESTS, "-q", "-m", "not postgresql", RG_TEST_POSTGRES_URL=url)
    assert completed.returncode == 0, completed.stdout
    assert " passed" in completed.stdout and "deselected" in completed.stdout


def test_no_chromium_is_one_line_when_browser_tests_run(tmp_path: Path) -> None:
    completed = pytest_run(BROWSER_TESTS, RG_TEST_CHROMIUM=str(tmp_path / "chromium"))
    assert completed.returncode == 4
    (line,) = problem_lines(completed, "Chromium")
    assert f"Chromium is missing: the browser tests drive {tmp_path / 'chromium'}" in line
    assert "-m 'not browser'" in line


def test_a_test_on_the_spark_session_is_marked_spark() -> None:
    # tests/spark/test_throttled_udf.py marks none of its tests: those on the session are
    # marked for it, so that `make test-spark35` (-m spark) runs them and no others.
    completed = pytest_run(
        "--collect-only", "-q", "-m", "spark", "tests/spark/test_throttled_udf.py"
    )
    assert completed.returncode == 0, completed.stdout
    selected = [line for line in completed.stdout.splitlines() if "::" in line]
    assert selected and all("::test_" in line for line in selected)
    assert "deselected" in completed.stdout
