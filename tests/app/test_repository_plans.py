"""The peers of a large group are read by a plan made for the group as it is now
(PostgreSQL): their statement is then not prepared, so PostgreSQL keeps no generic plan for
it, made while the group was small; the other statements stay prepared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, text

from app.quota.repository import UsageRepository
from app.state import state_of

RUNS = 15  # past the 5 runs after which the driver prepares a statement (psycopg's default)


def test_the_peers_statement_is_planned_afresh_while_others_stay_prepared(
    app: FastAPI, engine: Engine
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite keeps no plans between statements")
    now = datetime.now(UTC)
    with state_of(app).sessions() as session, session.begin():
        queries = UsageRepository.of(session)
        for _ in range(RUNS):
            assert queries.peers("r1", ["g1"], now, now - timedelta(minutes=1), plan_now=True) == []
            queries.generation()
        prepared = session.execute(text("SELECT statement FROM pg_prepared_statements"))
        statements = [" ".join(statement.split()) for statement in prepared.scalars()]
    assert not [statement for statement in statements if "quota_usage.written_at >" in statement]
    assert [statement for statement in statements if "FROM admin_changes" in statement]
