"""A connection PostgreSQL closed while it sat in the pool (a restart, a proxy's idle
timeout) is replaced by the next transaction that finds it so, unseen by the request; one
lost while committing is not run again, as its commit may have happened."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.api import deps
from app.schemas import ResourceGroupUpdate
from app.services import resourcegroups
from tests.app.test_write_retries import group_exists
from tests.factories import create_group


@pytest.fixture
def postgresql(app: FastAPI, engine: Engine) -> FastAPI:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's connections are files: nothing closes them under the app")
    return app


def close_connections(engine: Engine, *pids: int) -> int:
    """Have PostgreSQL end the app's connections (those given, else all), as a restart does."""
    other = create_engine(engine.url)
    try:
        with other.connect() as connection:
            return len(
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND (cardinality(CAST(:pids AS INTEGER[])) = 0 OR pid = ANY(:pids))"
                    ),
                    {"pids": list(pids)},
                ).all()
            )
    finally:
        other.dispose()


def test_requests_on_connections_the_database_closed_are_served(
    postgresql: FastAPI, client: TestClient, engine: Engine
) -> None:
    assert client.get("/admin/v2/resourcegroups").status_code == 200  # a connection pooled
    assert close_connections(engine) >= 1

    create_group(client, "rg", publishRateInMsgs=10)  # a write
    assert client.get("/admin/v2/resourcegroups").json() == ["rg"]  # and a read


def test_a_connection_lost_while_committing_is_not_run_again(
    postgresql: FastAPI, engine: Engine
) -> None:
    runs = 0

    def work(session: Session) -> None:
        nonlocal runs
        runs += 1
        resourcegroups.upsert(session, "rg", ResourceGroupUpdate(publishRateInMsgs=10))
        session.flush()
        # Its connection ends after the write, before the commit.
        close_connections(engine, session.scalar(text("SELECT pg_backend_pid()")))

    request: Any = SimpleNamespace(app=postgresql)
    with pytest.raises(DBAPIError) as raised:
        asyncio.run(deps.write(request, work))

    assert raised.value.connection_invalidated
    assert runs == 1
    assert not group_exists(engine)
