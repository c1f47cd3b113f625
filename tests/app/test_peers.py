"""A group's peers: the other live reporters' rows counted in it, and the sums of the
allocations of all the others' rows counted in it, read in two reads that each read only
what they are asked for, whatever the tables' statistics say."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.quota.planner import count
from app.quota.repository import UsageRepository
from app.state import state_of
from tests.app.plans import groups_of_a_namespace, rows_read

GROUPS = 40
REPORTERS = 30
NOW = datetime(2026, 1, 1, tzinfo=UTC)
GONE = {"r8", "r19"}  # their leases ran out


def _figures(reporter: int, group: int) -> tuple[float, ...]:
    return (float(reporter), float(group), 1.0) * 4


@pytest.fixture
def session(app: FastAPI, client: TestClient) -> Iterator[Session]:
    """Every reporter ``r<i>`` has a row in every group ``g<j>`` (namespace ``t/n<j>``),
    except that r1's row of t/n3 is still counted in g7 (it has not reported since its
    namespace moved)."""
    groups_of_a_namespace(client, GROUPS)
    with state_of(app).sessions() as session, session.begin():
        yield session


def _fill(queries: UsageRepository) -> None:
    for reporter in range(REPORTERS):
        name = f"r{reporter}"
        lease = timedelta(minutes=-1 if name in GONE else 1)
        queries.claim(name, "job", NOW + lease)
        rows = [
            (("t", f"n{group}"), f"g{group}", None, _figures(reporter, group))
            for group in range(GROUPS)
        ]
        if reporter == 1:
            rows[3] = (("t", "n3"), "g7", None, _figures(reporter, 3))
        queries.upsert(name, NOW, rows)


def test_the_peers_are_the_other_live_reporters_rows_counted_in_the_groups(
    session: Session,
) -> None:
    queries = UsageRepository.of(session)
    _fill(queries)
    peers, counted = queries.peers("r0", ["g3", "g7"], NOW)
    expected = {
        (f"g{group}", f"r{reporter}", ("t", f"n{group}"), _figures(reporter, group))
        for reporter in range(1, REPORTERS)
        for group in (3, 7)
        if f"r{reporter}" not in GONE and not (reporter == 1 and group == 3)
    }
    expected.add(("g7", "r1", ("t", "n3"), _figures(1, 3)))
    assert {(group, reporter, key, tuple(figures)) for group, reporter, key, figures in peers} == (
        expected
    )
    # Every other reporter's allocations counted in the group, of those gone too: r1's row
    # of t/n3 in g7 rather than g3.
    assert count(counted) == {"g3": [REPORTERS - 2.0] * 4, "g7": [float(REPORTERS)] * 4}
    assert queries.peers("r0", ["nobody's"], NOW) == ([], [])


def test_the_peers_read_only_their_groups_rows_whatever_the_statistics(
    session: Session,
) -> None:
    if session.get_bind().dialect.name != "postgresql":
        pytest.skip("SQLite's planner reads no statistics")
    # Gathered while the tables were empty, as when a fleet starts: planned as one join
    # from these, the read went through every live reporter's rows.
    session.execute(text("ANALYZE quota_reporters"))
    session.execute(text("ANALYZE quota_usage"))
    queries = UsageRepository.of(session)
    _fill(queries)
    groups = ["g3", "g5"]
    peers, _ = queries.peers("r0", groups, NOW)
    assert len(peers) == 2 * (REPORTERS - 1 - len(GONE)) - 1  # r1's row of t/n3 is in g7
    reporters = sorted({f"r{reporter}" for reporter in range(1, REPORTERS)})
    read = rows_read(session, queries._peers_sql(True), {"reporter_id": "r0", "groups": groups})
    read += rows_read(session, queries._alive_sql(True), {"reporters": reporters, "now": NOW})
    # Each of the groups' rows, and each of their reporters, once.
    assert read <= 2 * len(peers) + 2 * len(reporters)
