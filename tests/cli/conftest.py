"""Fixtures of the CLI tests: one real server per database and module, on a clock
the tests move (so that usage history is sampled when a test says, not every 10 s), and
``rgadmin`` run in-process against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from typer.testing import CliRunner, Result

from app.cli import cli
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import FakeClock, running_app


@pytest.fixture(scope="session")
def server_clock() -> FakeClock:
    return FakeClock()


# Stopped after each module, not at the session's end: the server's upkeep forgets every
# reporter whose lease ran out by its own clock, which the tests move far ahead, and the
# other tests' servers share its database.
@pytest.fixture(scope="module")
def cli_app(database_url: str, secret_key: bytes, server_clock: FakeClock) -> Iterator[FastAPI]:
    with running_app(make_settings(database_url, secret_key), clock=server_clock) as application:
        yield application


@pytest.fixture(scope="module")
def session_server(cli_app: FastAPI) -> Iterator[str]:
    with serve(cli_app) as url:
        yield url


@pytest.fixture
def server(session_server: str, engine: Engine) -> str:
    """The base URL of the session's server, on empty tables."""
    return session_server


@pytest.fixture(autouse=True)
def no_connection_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No RG_ADMIN_* variables and an empty config directory: only what a test sets counts.
    The directory is returned: ``rgadmin/client.conf`` in it is the default config file."""
    for name in ("RG_ADMIN_URL", "RG_ADMIN_TOKEN", "RG_ADMIN_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    config_home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    return config_home


@dataclass
class Rgadmin:
    """``rgadmin --admin-url URL --auth-params token:... ARGS`` in-process, as ``role``."""

    url: str
    token: Callable[[str], str]

    def __call__(self, *args: str, role: str | None = SUPERUSER) -> Result:
        options = ["--admin-url", self.url]
        if role is not None:
            options += ["--auth-params", f"token:{self.token(role)}"]
        return CliRunner().invoke(cli, [*options, *args])


@pytest.fixture
def rgadmin(server: str, token: Callable[[str], str]) -> Rgadmin:
    return Rgadmin(server, token)


def ok(result: Result) -> str:
    """The standard output of a command that succeeded."""
    assert result.exception is None, (result.exception, result.output)
    assert result.exit_code == 0, result.output
    return result.stdout


def failure(result: Result) -> str:
    """The one line of a command that failed as it should: exit status 1, nothing on standard
    output, ``Error: ...`` on standard error and no traceback."""
    # An unexpected exception leaves CliRunner with exit status 1 too, but not a SystemExit.
    assert isinstance(result.exception, SystemExit), (result.exception, result.output)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0].removeprefix("Error: ")
