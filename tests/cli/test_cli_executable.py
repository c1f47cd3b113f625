"""The installed ``rgadmin`` executable: the connection settings reach it from the
environment, a client.conf and a token file, and its HTTP commands never load the server's
code (its database layer, SQLAlchemy, FastAPI)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SUPERUSER

RGADMIN = Path(sys.executable).with_name("rgadmin")
SERVER_MODULES = ("app.db", "app.main", "app.api", "sqlalchemy", "fastapi", "starlette", "uvicorn")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RGADMIN), *args],
        capture_output=True,
        text=True,
        env=os.environ | (env or {}),
        timeout=60,
    )


@pytest.fixture
def token_file(tmp_path: Path, token: Callable[[str], str]) -> Path:
    path = tmp_path / "admin.token"
    path.write_text(token(SUPERUSER) + "\n")
    return path


def test_environment(server: str, token: Callable[[str], str]) -> None:
    env = {"RG_ADMIN_URL": server, "RG_ADMIN_TOKEN": token(SUPERUSER)}
    created = run("resourcegroups", "create", "rg", "-mp", "5", env=env)
    assert (created.returncode, created.stdout, created.stderr) == (0, "", "")
    listed = run("resourcegroups", "list", env=env)
    assert (listed.returncode, listed.stdout) == (0, "rg\n")


def test_config_file_with_a_token_file(server: str, token_file: Path, tmp_path: Path) -> None:
    config = tmp_path / "client.conf"
    config.write_text(f"webServiceUrl={server}\nauthParams={token_file.as_uri()}\n")
    created = run("tenants", "create", "t", "-r", "a", env={"RG_ADMIN_CONFIG": str(config)})
    assert created.returncode == 0, created.stderr
    assert run("tenants", "list", env={"RG_ADMIN_CONFIG": str(config)}).stdout == "t\n"


def test_auth_params_token_file_option(server: str, token_file: Path) -> None:
    options = ["--admin-url", server, "--auth-params", token_file.as_uri()]
    got = run(*options, "default-resource-group", "get")
    assert (got.returncode, got.stdout) == (0, "null\n")


def test_a_failure_is_one_line_and_status_1(server: str, token_file: Path) -> None:
    options = ["--admin-url", server, "--auth-params", token_file.as_uri()]
    missing = run(*options, "resourcegroups", "get", "nope")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "Error: ResourceGroup does not exist (HTTP 404)\n"


@pytest.mark.parametrize("command", [["resourcegroups", "list"], ["top", "--once"]])
def test_the_http_commands_never_import_the_server(
    server: str, token_file: Path, command: list[str]
) -> None:
    # Python writes every module it imports to stderr, with its full dotted name.
    options = ["--admin-url", server, "--auth-params", token_file.as_uri()]
    result = run(*options, *command, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines()}
    assert "app.commands.admin_client" in imported
    loaded = [
        name
        for name in imported
        if any(name == root or name.startswith(f"{root}.") for root in SERVER_MODULES)
    ]
    assert loaded == []
