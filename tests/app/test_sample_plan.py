"""The usage history's sample reads each changed group's rows once, whatever the tables'
statistics say: gathered a moment before the groups changed (autovacuum gathers them every
minute or so), they estimate that one group changed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.models import QuotaGroup
from app.quota import history
from app.quota.repository import UsageRepository
from app.state import state_of
from tests.app.plans import groups_of_a_namespace, rows_passed

GROUPS = 100
REPORTERS = 10
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def session(app: FastAPI, client: TestClient) -> Iterator[Session]:
    """Every reporter ``r<i>`` has a row in every group ``g<j>`` (namespace ``t/n<j>``)."""
    if state_of(app).settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite's planner reads no statistics")
    groups_of_a_namespace(client, GROUPS)
    with state_of(app).sessions() as session, session.begin():
        yield session


def test_a_sample_reads_each_changed_groups_rows_once(session: Session) -> None:
    queries = UsageRepository.of(session)
    names = [f"g{group}" for group in range(GROUPS)]
    queries.lock(names, NOW)
    for reporter in range(REPORTERS):
        queries.claim(f"r{reporter}", "job", NOW + timedelta(minutes=1))
        rows = [
            (("t", f"n{group}"), f"g{group}", None, (1.0, 2.0, 3.0) * 4) for group in range(GROUPS)
        ]
        queries.upsert(f"r{reporter}", NOW, rows)
    session.execute(text("ANALYZE"))
    later = NOW + timedelta(seconds=30)
    queries.move_markers(names, later)  # every group changed since the statistics
    changed = select(QuotaGroup.name).where(QuotaGroup.changed_at > NOW)
    statement = history._sums(later, changed.subquery())
    assert len(session.execute(statement).all()) == GROUPS
    # Each group, row and reporter passed on a few times at most; planned as a nested loop
    # over the groups, an aggregate of every group's rows, or a scan of every group, ran
    # for each group.
    passed = rows_passed(session, statement)
    assert passed <= 4 * (GROUPS * REPORTERS + GROUPS + REPORTERS)
