"""The peers of a large group are read by a plan made for the group as it is now
(PostgreSQL): their statement is then not prepared, so PostgreSQL keeps no generic plan for
it, made while the group was small; the other statements stay prepared."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, text

from app.quota.repository import UsageRepository
from app.state import state_of
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    INTERVAL_S,
    Auth,
    body,
    report,
    world,
)
from tests.factories import FakeClock

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
            assert queries.peers("r1", ["g1"], now, plan_now=True) == []
            queries.generation()
        prepared = session.execute(text("SELECT statement FROM pg_prepared_statements"))
        statements = [" ".join(statement.split()) for statement in prepared.scalars()]
    # The peers' statement is the only one of these that reads reporters' leases.
    assert "quota_reporters.lease_until >" in str(queries.sql.peers)
    assert not [s for s in statements if "quota_reporters.lease_until >" in s]
    assert [statement for statement in statements if "FROM admin_changes" in statement]


@pytest.mark.usefixtures("world")
@pytest.mark.parametrize(("workers", "planned_now"), [(8, False), (48, True)])
def test_only_a_large_groups_peers_are_planned_now(
    servers: list[FastAPI],
    auth: Auth,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    planned_now: bool,
) -> None:
    # Every worker joins, then each wants more (a change): the group is summarized again
    # from its peers, which a group of more than 32 rows has read by a plan made now.
    reads: list[bool] = []
    real_peers = UsageRepository.peers

    def peers(self: UsageRepository, *args: Any, plan_now: bool = False) -> Any:
        reads.append(plan_now)
        return real_peers(self, *args, plan_now=plan_now)

    headers = auth("job")
    for demand in (10.0, 20.0):
        clock.now += INTERVAL_S
        for worker in range(workers):
            report(servers[worker % 2], headers, f"w{worker}", body(clock, demand))
        monkeypatch.setattr(UsageRepository, "peers", peers)  # from the change on
    assert reads
    assert any(reads) is planned_now
