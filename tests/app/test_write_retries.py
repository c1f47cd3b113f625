"""A transaction PostgreSQL aborts for colliding with another (a deadlock, a serialization
failure) is run again, and never answered as "Database unavailable"; if it keeps colliding,
the answer says so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from app import transactions
from app.api import deps
from app.api.errors import register_error_handlers
from app.models import ResourceGroup
from app.schemas import ResourceGroupUpdate
from app.services import resourcegroups
from app.state import attach, state_of


def collide(session: Session, sqlstate: str = "deadlock_detected") -> None:
    """Have PostgreSQL abort the transaction as it does a deadlock's victim."""
    session.execute(
        text(f"DO $$ BEGIN RAISE EXCEPTION 'collided' USING ERRCODE = '{sqlstate}'; END $$")
    )


@pytest.fixture
def postgresql(app: FastAPI, engine: Engine) -> FastAPI:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's writers take turns: they never deadlock")
    return app


def run_write(app: FastAPI, work: Callable[[Session], Any]) -> Any:
    request: Any = SimpleNamespace(app=app)
    return asyncio.run(deps.write(request, work))


def group_exists(engine: Engine) -> bool:
    with engine.connect() as connection:
        return connection.scalar(select(ResourceGroup.name)) is not None


@pytest.mark.parametrize("sqlstate", ["deadlock_detected", "serialization_failure"])
def test_a_collision_is_run_again(postgresql: FastAPI, engine: Engine, sqlstate: str) -> None:
    attempts = 0

    def work(session: Session) -> str:
        nonlocal attempts
        attempts += 1
        resourcegroups.upsert(session, "rg", ResourceGroupUpdate(publishRateInMsgs=attempts))
        if attempts <= 3:
            collide(session, sqlstate)
        return "done"

    assert run_write(postgresql, work) == "done"
    assert attempts == 4
    with engine.connect() as connection:
        # Only the attempt that committed left anything.
        assert connection.execute(select(ResourceGroup.publish_rate_in_msgs)).all() == [(4,)]


def test_other_database_errors_are_not(postgresql: FastAPI, engine: Engine) -> None:
    attempts = 0

    def work(session: Session) -> None:
        nonlocal attempts
        attempts += 1
        collide(session, "undefined_table")

    with pytest.raises(Exception, match="collided"):
        run_write(postgresql, work)
    assert attempts == 1


def test_collisions_without_end_are_a_503_that_says_so(postgresql: FastAPI, engine: Engine) -> None:
    attempts = 0

    def work(session: Session) -> None:
        nonlocal attempts
        attempts += 1
        resourcegroups.upsert(session, "rg", ResourceGroupUpdate())
        collide(session)

    # Over HTTP, through the application's own error handlers.
    api = FastAPI()
    attach(api, state_of(postgresql))
    register_error_handlers(api)

    @api.post("/write")
    async def write(request: Request) -> None:
        await deps.write(request, work)

    response = TestClient(api, raise_server_exceptions=False).post("/write")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    reason = response.json()["reason"]
    assert "collided with concurrent writes" in reason
    assert "unavailable" not in reason.lower()
    assert attempts == transactions.ATTEMPTS
    assert not group_exists(engine)


@pytest.mark.parametrize(
    ("sqlstate", "status", "reason"),
    [
        # This request's statement alone: a server error, not the database's outage.
        ("statement_too_complex", 500, "Internal database error"),
        ("check_violation", 500, "Internal database error"),
        # The database cannot serve anyone.
        ("admin_shutdown", 503, "Database unavailable"),
        ("too_many_connections", 503, "Database unavailable"),
    ],
)
def test_only_a_database_that_cannot_serve_is_an_outage(
    postgresql: FastAPI, sqlstate: str, status: int, reason: str
) -> None:
    api = FastAPI()
    attach(api, state_of(postgresql))
    register_error_handlers(api)

    @api.post("/write")
    async def write(request: Request) -> None:
        await deps.write(request, lambda session: collide(session, sqlstate))

    outage = transactions.DATABASE_OUTAGE
    try:
        response = TestClient(api, raise_server_exceptions=False).post("/write")
        assert (response.status_code, response.json()["reason"]) == (status, reason)
        assert outage.down is (status == 503)
    finally:
        outage.succeeded()
