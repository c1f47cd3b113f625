"""Reports stored in one transaction share its round trips (`UsageRepository.of`): the
process's reads of markers while nothing in the transaction moves one, and one lock per
group (both databases)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session

from app.models import QuotaGroup, QuotaReporter
from app.quota.repository import Claim, UsageRepository
from app.state import state_of
from tests.app.conftest import FakeClock
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    Auth,
    body,
    report,
    world,
)


@contextmanager
def statements(engine: Engine, table: str) -> Iterator[list[str]]:
    """The statements run on ``table`` meanwhile."""
    seen: list[str] = []

    def before(_c: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if table in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def transaction(app: FastAPI) -> Session:
    session: Session = state_of(app).sessions()
    session.begin()
    return session


@pytest.mark.usefixtures("world")
class TestOneTransactionsReports:
    def test_only_what_may_move_a_marker_counts_as_moving_one(
        self, app: FastAPI, engine: Engine
    ) -> None:
        # A steady report writes nothing of its groups: the process's shared reads of the
        # markers still serve the transaction's later reports.
        now = datetime.now(UTC)
        with transaction(app) as session:
            UsageRepository.of(session).lock(["g1"], now)  # g1 gets its row
            session.commit()
        with transaction(app) as session:
            queries = UsageRepository.of(session)
            queries.write("r", now, [], [], set(), None)  # what a steady report writes
            queries.take_in_force({})
            queries.move_markers([], now)
            queries.lock(["g1"], now)
            # SQLite's lock makes a missing row without saying whether it did.
            assert queries.moved is (engine.dialect.name != "postgresql")
            queries.lock(["g2"], now)  # a new group's row, with a new marker
            assert queries.moved
            session.rollback()

    def test_groups_are_locked_once_per_transaction(self, app: FastAPI, engine: Engine) -> None:
        with transaction(app) as session, statements(engine, "INSERT INTO quota_groups") as seen:
            now = datetime.now(UTC)
            UsageRepository.of(session).lock(["g1"], now)
            UsageRepository.of(session).lock(["g1"], now)
            UsageRepository.of(session).lock(["g1", "g2"], now)
            assert len(seen) == 2
            session.rollback()

    def test_a_batchs_reporters_are_claimed_in_one_statement(
        self, app: FastAPI, engine: Engine
    ) -> None:
        now = datetime.now(UTC)
        later = now + timedelta(seconds=8)
        claims = [Claim("b", "job", later), Claim("a", "job", later), Claim("a", "job", now)]
        with transaction(app) as session, statements(engine, "INTO quota_reporters") as seen:
            queries = UsageRepository.of(session)
            claimed = queries.claim_all(claims)
            ahead = len(seen)
            owners = []
            for claim in claims:  # as a lane's reports take them (`app.quota.lanes`)
                took = claimed.pop(claim.reporter_id, None)
                owners.append(took or queries.claim(claim.reporter_id, claim.role, claim.until))
            session.commit()
        assert [owner for owner, _, _ in owners] == ["job"] * 3
        if engine.dialect.name == "postgresql":
            # One for the batch; "a" again, as its second report claims another lease.
            assert (ahead, len(seen)) == (1, 2)
        else:  # under the database's write lock: each report claims its own
            assert (ahead, len(seen)) == (0, 3)
        with Session(engine) as session:
            rows = session.execute(select(QuotaReporter.reporter_id, QuotaReporter.lease_until))
            leases = {reporter: moment.replace(tzinfo=UTC) for reporter, moment in rows}
        assert leases == {"a": now, "b": later}

    def test_a_group_held_is_read_once_then_as_the_transaction_wrote_it(
        self, app: FastAPI, engine: Engine
    ) -> None:
        now = datetime.now(UTC)
        sums = (1.0, 2.0, 3.0, 4.0)
        with transaction(app) as session, statements(engine, "FROM quota_groups") as seen:
            queries = UsageRepository.of(session)
            queries.lock(["g"], now)
            first = queries.group_rows(["g"])["g"]
            queries.save_groups([("g", '{"levels": 1}', sums, False)], {"g"}, now)
            again = UsageRepository.of(session).group_rows(["g"])["g"]
            reads = [s for s in seen if s.lstrip().startswith("SELECT")]
            # SQLite's path moves the marker in a statement of its own, and reads it back.
            assert len(reads) == (1 if engine.dialect.name == "postgresql" else 2)
            stored = session.execute(
                select(QuotaGroup.marker, QuotaGroup.levels).where(QuotaGroup.name == "g")
            ).one()
            assert (again.marker, again.levels) == tuple(stored)
            assert again.marker != first.marker and again.in_force == sums
            queries.take_in_force({"g": (1.0, 0.0, 0.0, 0.0)})
            after = UsageRepository.of(session).group_rows(["g"])["g"]
            assert after.in_force == (0.0, 2.0, 3.0, 4.0)  # read again, as changed
            session.rollback()


@pytest.mark.usefixtures("world")
def test_a_reports_session_is_freed_without_the_garbage_collector(
    servers: list[FastAPI], auth: Auth, clock: FakeClock
) -> None:
    # Left in a reference cycle, every report's session (some 40 objects) waits for the
    # collector, whose passes over them stalled a busy server for 90 ms every few seconds.
    server = servers[0]
    for _ in range(3):  # joining, settling, steady
        report(server, auth("job"), "a", body(clock, 100))
    flags = gc.get_debug()
    gc.collect()
    gc.disable()
    try:
        report(server, auth("job"), "a", body(clock, 100))
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [type(found).__name__ for found in gc.garbage if isinstance(found, Session)]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []


def marker_reads(seen: list[str]) -> int:
    """How many of ``seen`` read groups' markers by name (`UsageRepository.markers`)."""
    return sum(
        "quota_groups.marker" in s and "levels" not in s and "changed_at" not in s for s in seen
    )


@pytest.mark.usefixtures("world")
def test_a_processs_workers_share_a_read_of_their_groups_marker(
    servers: list[FastAPI], auth: Auth, clock: FakeClock
) -> None:
    # A Spark worker's report reads its group's marker as it is; the process's other
    # reports within `MARKER_LOOK_S` share that read, until one of them moves a marker.
    job, engine = auth("job"), state_of(servers[0]).engine
    for _ in range(4):
        clock.now += 1
        for worker in ("a", "b", "c"):
            report(servers[0], job, worker, body(clock, 200))
    clock.now += 1
    with statements(engine, "FROM quota_groups") as seen:
        for worker in ("a", "b", "c"):
            report(servers[0], job, worker, body(clock, 200))
    assert marker_reads(seen) == 1
    with statements(engine, "FROM quota_groups") as seen:
        report(servers[0], job, "b", body(clock, 400))  # moves the group's marker
        assert marker_reads(seen) == 0
        report(servers[0], job, "c", body(clock, 200))
        assert marker_reads(seen) == 1
