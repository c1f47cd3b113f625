"""A database behind the code's migrations: `/health` says 503 and why, `rgadmin serve` refuses
to start on PostgreSQL in one line naming `rgadmin migrate`, and starts once it has run."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.db import alembic_config, migrations_directory, sqlalchemy_url, upgrade_schema
from app.schema_version import read_state
from tests.app.processes import free_port, wait_healthy
from tests.conftest import empty_database, make_settings, postgres_database
from tests.factories import running_app

RGADMIN = str(Path(sys.executable).with_name("rgadmin"))
HEADS = set(ScriptDirectory(str(migrations_directory())).get_heads())


def first_revision() -> str:
    script = ScriptDirectory(str(migrations_directory()))
    (base,) = script.get_bases()
    return base


def health(database_url: str, secret_key: bytes) -> httpx.Response:
    with running_app(make_settings(database_url, secret_key)) as app:
        return TestClient(app, raise_server_exceptions=False).get("/health")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_health_is_503_while_the_schema_is_behind_and_200_once_migrated(
    backend: str, tmp_path: Path, secret_key: bytes
) -> None:
    with empty_database(backend, tmp_path) as url:
        empty = health(url, secret_key)
        assert empty.status_code == 503
        assert "no schema" in empty.json()["reason"]
        assert "rgadmin migrate" in empty.json()["reason"]

        command.upgrade(alembic_config(url), first_revision())
        behind = health(url, secret_key)
        assert behind.status_code == 503
        reason = behind.json()["reason"]
        assert f"at revision {first_revision()}, behind this server's" in reason
        assert "rgadmin migrate" in reason

        upgrade_schema(url)
        assert health(url, secret_key).json() == {"status": "ok"}


def test_health_sees_a_migration_without_a_restart(tmp_path: Path, secret_key: bytes) -> None:
    # The state is read at each call, not cached at startup: migrating a running server's
    # database turns its /health green, and restoring an old backup turns it red.
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    command.upgrade(alembic_config(url), first_revision())
    with running_app(make_settings(url, secret_key)) as app:
        client = TestClient(app, raise_server_exceptions=False)
        assert client.get("/health").status_code == 503
        upgrade_schema(url)
        assert client.get("/health").status_code == 200
        command.downgrade(alembic_config(url), first_revision())
        assert client.get("/health").status_code == 503


def test_a_revision_from_a_newer_release_is_not_behind(tmp_path: Path, secret_key: bytes) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade_schema(url)
    engine = create_engine(sqlalchemy_url(url))
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'from-a-newer-release'"))
        state = read_state(connection)
    engine.dispose()
    assert state.unknown
    assert not state.behind
    assert "does not know" in state.describe()
    # Its tables are this release's and more: the server serves rather than refuse a rollback.
    assert health(url, secret_key).status_code == 200


def rgadmin(*args: str, database_url: str, cwd: Path) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    env["RG_DATABASE_URL"] = database_url
    env["RG_AUTH_TOKEN_SECRET_KEY"] = "data:;base64," + base64.b64encode(b"k" * 32).decode()
    return subprocess.Popen(
        [RGADMIN, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.postgresql
@pytest.mark.parametrize("migrated_to", ["nothing", "first revision"])
def test_serve_refuses_a_postgresql_schema_behind_in_one_line(
    migrated_to: str, tmp_path: Path
) -> None:
    with postgres_database() as url:
        if migrated_to == "first revision":
            command.upgrade(alembic_config(url), first_revision())
        process = rgadmin("serve", "--port", "1", database_url=url, cwd=tmp_path)
        stdout, stderr = process.communicate(timeout=30)
        assert process.returncode == 1
        (line,) = stderr.splitlines()
        assert line.startswith("Error: The database ")
        assert "run `rgadmin migrate`" in line
        assert "postgresql://postgres@" in line
        assert stdout == ""


@pytest.mark.postgresql
def test_serve_starts_on_postgresql_once_migrated(tmp_path: Path) -> None:
    with postgres_database() as url:
        migrate = rgadmin("migrate", database_url=url, cwd=tmp_path)
        _, stderr = migrate.communicate(timeout=60)
        assert migrate.returncode == 0, stderr
        engine = create_engine(sqlalchemy_url(url))
        with engine.connect() as connection:
            assert read_state(connection).current == HEADS
        engine.dispose()

        port = free_port()
        server = rgadmin(
            "serve", "--port", str(port), "--no-access-log", database_url=url, cwd=tmp_path
        )
        try:
            assert wait_healthy(f"http://127.0.0.1:{port}") == {"status": "ok"}
        finally:
            server.terminate()
            server.communicate(timeout=15)
