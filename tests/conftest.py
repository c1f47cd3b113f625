"""Shared fixtures: every API test runs against SQLite and against a real PostgreSQL.

Each database is created for the run, built with the migrations (never ``create_all``), and
dropped afterwards. Tests start from empty tables.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, make_url, select

from app.auth import create_token, generate_secret_key
from app.cli import GRACEFUL_SHUTDOWN_S
from app.config import Settings
from app.db import sqlalchemy_url, upgrade_schema
from app.models import Base
from app.state import state_of
from tests import preflight
from tests.factories import running_app

POSTGRES_URL = os.environ.get("RG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SUPERUSER = "admin"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the markers set here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        preflight.mark(item)


def pytest_collection_finish(session: pytest.Session) -> None:
    # PostgreSQL, Java or Chromium missing: one line, not an error from every test.
    preflight.check(session, POSTGRES_URL)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database; its URL is yielded and it is dropped afterwards."""
    name = f"rg_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(sqlalchemy_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@contextmanager
def empty_database(backend: str, directory: Any) -> Iterator[str]:
    if backend == "postgresql":
        with postgres_database() as url:
            yield url
    else:
        yield f"sqlite:///{directory / f'{uuid.uuid4().hex}.db'}"


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with empty_database(request.param, tmp_path_factory.mktemp("db")) as url:
        upgrade_schema(url)
        yield url


@pytest.fixture(scope="session")
def secret_key() -> bytes:
    return generate_secret_key()


def make_settings(database_url: str, secret_key: bytes, **overrides: Any) -> Settings:
    return Settings(
        database_url=database_url,
        auth_token_secret_key="data:;base64," + base64.b64encode(secret_key).decode(),
        superuser_roles=SUPERUSER,
        **overrides,
    )


@pytest.fixture(scope="session")
def app(database_url: str, secret_key: bytes) -> Iterator[FastAPI]:
    with running_app(make_settings(database_url, secret_key)) as application:
        yield application


@pytest.fixture
def engine(app: FastAPI) -> Iterator[Engine]:
    engine: Engine = state_of(app).engine
    empty_tables(engine)
    yield engine


def empty_tables(engine: Engine) -> None:
    with engine.begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(table.delete())


@pytest.fixture
def token(secret_key: bytes) -> Callable[[str], str]:
    return lambda role: create_token(subject=role, secret_key=secret_key)


@pytest.fixture
def auth(token: Callable[[str], str]) -> Callable[[str], dict[str, str]]:
    """Request headers carrying a valid token for a role."""
    return lambda role: {"Authorization": f"Bearer {token(role)}"}


@pytest.fixture
def client(app: FastAPI, engine: Engine, auth: Callable[[str], dict[str, str]]) -> TestClient:
    """A client authenticated as the superuser, on empty tables."""
    return TestClient(app, headers=auth(SUPERUSER), raise_server_exceptions=False)


@pytest.fixture
def anonymous(app: FastAPI, engine: Engine) -> TestClient:
    return TestClient(app, raise_server_exceptions=False)


UNDUMPED = ("admin_changes", "resource_group_changes", "usage_samples", "usage_sampling")


def dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, to prove that a rejected write changed nothing.

    The admin generation and the log of changed groups are left out: they say whether
    something was written, not what; and so is the usage history, which a
    running server samples by itself.
    """
    with engine.connect() as connection:
        return {
            table.name: sorted((tuple(row) for row in connection.execute(select(table))), key=repr)
            for table in Base.metadata.sorted_tables
            if table.name not in UNDUMPED
        }


@pytest.fixture
def unchanged(engine: Engine) -> Callable[[], Any]:
    @contextmanager
    def check() -> Iterator[None]:
        before = dump(engine)
        yield
        assert dump(engine) == before

    return check


@contextmanager
def serve(
    app: FastAPI,
    *,
    port: int | None = None,
    uds: str | None = None,
    graceful_s: float = GRACEFUL_SHUTDOWN_S,  # as `rgadmin serve`: see there
) -> Iterator[str]:
    """The app on a real HTTP port (``port``, or a free one) or a Unix socket (``uds``), in a
    background thread; yields its base URL. It stops when the block ends, within
    ``graceful_s`` (0: at once, closing the connections it holds, long polls among them)."""
    where: dict[str, Any] = {"uds": uds} if uds else {"host": "127.0.0.1", "port": port}
    if not uds and port is None:
        where["port"] = free_port()
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=graceful_s, **where
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield "http://localhost" if uds else f"http://127.0.0.1:{where['port']}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def live_url(app: FastAPI, engine: Engine) -> Iterator[str]:
    """The shared app over real HTTP, on empty tables."""
    with serve(app) as url:
        yield url
