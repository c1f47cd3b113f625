"""Reports of one namespace queued behind a running one are stored together, in one
transaction, each with its own answer; one that fails fails alone (both databases)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.errors import Forbidden, ServiceUnavailable
from app.models import QuotaReporter, RequestQuota
from app.quota import lanes as lanes_module
from app.quota import reporters
from app.quota.lanes import ReportLanes, Work
from app.quota.tuning import MAX_BATCH, SATURATED
from app.state import state_of
from rgspark.wire import GRACE_INTERVALS, KEPT_HEADER


class Reports:
    """Reports that each store a row of their own and answer with their role, noting the
    transaction they ran in."""

    def __init__(self) -> None:
        self.transactions: dict[str, int] = {}
        self._sessions = itertools.count()
        self.first_started = threading.Event()
        self.release_first = threading.Event()

    def store(self, role: str, *, fails: bool = False, first: bool = False) -> Work:
        def work(session: Session, *, pace_s: float, **_: Any) -> bytes:
            if first:
                self.first_started.set()
                self.release_first.wait(10)
            session.add(RequestQuota(role=role, requests_per_second=1))
            session.flush()
            # Each transaction runs in a session of its own (`app.api.deps`).
            self.transactions[role] = session.info.setdefault("number", next(self._sessions))
            if fails:
                raise Forbidden(f"{role} may not report")
            return role.encode()

        return work


def stored(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return sorted(session.scalars(select(RequestQuota.role)))


async def queue_behind_first(
    lanes: ReportLanes, reports: Reports, *works: Work
) -> list[bytes | BaseException]:
    first = asyncio.ensure_future(lanes.submit("t/ns", "first", reports.store("first", first=True)))
    await asyncio.to_thread(reports.first_started.wait, 10)
    queued = [
        asyncio.ensure_future(lanes.submit("t/ns", f"r{index}", work))
        for index, work in enumerate(works)
    ]
    await asyncio.sleep(0.05)  # all queued while the first one's transaction runs
    reports.release_first.set()
    return await asyncio.gather(first, *queued, return_exceptions=True)


def test_reports_queued_behind_one_are_stored_in_one_transaction(
    app: FastAPI, engine: Engine
) -> None:
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=60, interval_s=1.0, silent_s=10.0),
        Reports(),
    )
    roles = [f"r{index}" for index in range(5)]

    answers = asyncio.run(
        queue_behind_first(lanes, reports, *(reports.store(role) for role in roles))
    )

    assert answers == [b"first", *(role.encode() for role in roles)]
    assert stored(engine) == sorted(["first", *roles])
    assert len({reports.transactions[role] for role in roles}) == 1
    assert reports.transactions["first"] != reports.transactions["r0"]


def test_a_failing_report_fails_alone_and_the_others_are_stored_once(
    app: FastAPI, engine: Engine
) -> None:
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=60, interval_s=1.0, silent_s=10.0),
        Reports(),
    )

    answers = asyncio.run(
        queue_behind_first(
            lanes,
            reports,
            reports.store("before"),
            reports.store("refused", fails=True),
            reports.store("after"),
        )
    )

    assert answers[:2] == [b"first", b"before"]
    assert isinstance(answers[2], Forbidden)
    assert answers[3] == b"after"
    # The batch was rolled back and its reports stored again one by one: the refused
    # report's row is gone with it, the others' are there once.
    assert stored(engine) == ["after", "before", "first"]
    assert reports.transactions["before"] != reports.transactions["after"]


def test_a_long_queue_is_stored_in_batches_of_at_most_max_batch(
    app: FastAPI, engine: Engine
) -> None:
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=60, interval_s=1.0, silent_s=10.0),
        Reports(),
    )
    roles = [f"r{index:03d}" for index in range(MAX_BATCH + 3)]

    answers = asyncio.run(
        queue_behind_first(lanes, reports, *(reports.store(role) for role in roles))
    )

    assert answers[1:] == [role.encode() for role in roles]
    batches = [reports.transactions[role] for role in roles]
    assert len(set(batches[:MAX_BATCH])) == 1
    assert len(set(batches[MAX_BATCH:])) == 1
    assert batches[0] != batches[-1]
    assert stored(engine) == sorted(["first", *roles])


def test_reports_without_a_lane_and_of_other_namespaces_do_not_wait(
    app: FastAPI, engine: Engine
) -> None:
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=60, interval_s=1.0, silent_s=10.0),
        Reports(),
    )

    async def run() -> list[bytes]:
        first = asyncio.ensure_future(
            lanes.submit("t/ns", "first", reports.store("first", first=True))
        )
        await asyncio.to_thread(reports.first_started.wait, 10)
        # Answered while the first one is still held in its transaction.
        others = [
            await lanes.submit(None, "broker", reports.store("broker")),
            await lanes.submit("t/other", "other", reports.store("other")),
        ]
        reports.release_first.set()
        return [await first, *others]

    if engine.dialect.name == "sqlite":
        # SQLite has one writer at a time: the others would wait for the first's lock.
        reports.release_first.set()
    assert asyncio.run(run()) == [b"first", b"broker", b"other"]
    assert stored(engine) == ["broker", "first", "other"]


def test_reports_that_waited_too_long_are_answered_503_unstored(
    app: FastAPI, engine: Engine
) -> None:
    """A lane sheds what waited past its workers' patience; what came after is stored."""
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=0.2, interval_s=1.0, silent_s=10.0),
        Reports(),
    )

    async def run() -> list[bytes | BaseException]:
        first = asyncio.ensure_future(
            lanes.submit("t/ns", "first", reports.store("first", first=True))
        )
        await asyncio.to_thread(reports.first_started.wait, 10)
        old = [asyncio.ensure_future(lanes.submit("t/ns", r, reports.store(r))) for r in "ab"]
        await asyncio.sleep(0.3)  # the first one's transaction holds them past their wait
        new = asyncio.ensure_future(lanes.submit("t/ns", "c", reports.store("c")))
        await asyncio.sleep(0.01)
        reports.release_first.set()
        return await asyncio.gather(first, *old, new, return_exceptions=True)

    first, a, b, c = asyncio.run(run())

    assert (first, c) == (b"first", b"c")
    assert isinstance(a, ServiceUnavailable) and isinstance(b, ServiceUnavailable)
    assert a.status_code == 503 and "waited over 0.2 s in line, with 3 reports" in a.reason
    assert stored(engine) == ["c", "first"]


@pytest.mark.parametrize("moved", [False, True], ids=["same-process", "moved-process"])
def test_a_report_that_waits_keeps_its_worker_alive_and_its_503_says_how_long(
    app: FastAPI, engine: Engine, moved: bool
) -> None:
    """A worker whose report waits in line is counted alive while it does, past the end of
    its lease, and its shed report tells it so: shed, it holds its last allocation as long
    as the server counts it, not its fallback while the server hands its share out. So too
    a worker this process never answered (``moved``: another one did), whose report it
    takes for a first one until the keep finds it counted."""
    interval_s, max_wait_s = 1.0, 0.3
    lanes, reports = (
        ReportLanes(
            state_of(app).sessions,
            max_wait_s=max_wait_s,
            interval_s=interval_s,
            silent_s=10.0,
            keep=partial(reporters.keep, clock=time.time, interval_s=interval_s),
        ),
        Reports(),
    )
    ending = datetime.now(UTC) + timedelta(seconds=0.1)  # the worker's lease ends in line
    with Session(engine) as session, session.begin():
        session.add(QuotaReporter(reporter_id="worker", role="job", lease_until=ending))

    async def run() -> list[bytes | BaseException]:
        first = asyncio.ensure_future(
            lanes.submit("t/ns", "first", reports.store("first", first=True))
        )
        await asyncio.to_thread(reports.first_started.wait, 10)
        queued = [
            asyncio.ensure_future(
                lanes.submit("t/ns", r, reports.store(r), joins=moved and r == "worker")
            )
            for r in WAIT
        ]
        await asyncio.sleep(max_wait_s + 0.2)  # they wait past their patience, and the lease
        reports.release_first.set()
        return await asyncio.gather(first, *queued, return_exceptions=True)

    queued_at = datetime.now(UTC)
    first, worker, ghost = asyncio.run(run())

    assert first == b"first"
    assert isinstance(worker, ServiceUnavailable) and isinstance(ghost, ServiceUnavailable)
    assert worker.headers == {KEPT_HEADER: str(round(max_wait_s * 1000))}
    assert ghost.headers == {KEPT_HEADER: "0"}  # it never reported: not counted
    with Session(engine) as session:
        lease_until = session.scalars(select(QuotaReporter.lease_until)).one()
    # Kept from its arrival for the longest wait and the grace, as an answer's lease would.
    kept = timedelta(seconds=max_wait_s + GRACE_INTERVALS * interval_s)
    assert queued_at + kept <= lease_until.replace(tzinfo=UTC) <= datetime.now(UTC) + kept


WAIT = ("worker", "ghost")


@pytest.mark.parametrize(
    ("held_s", "keeps"), [(0.05, False), (0.8, True)], ids=["briefly", "saturated"]
)
def test_only_a_report_that_waits_as_long_as_in_a_saturated_lane_keeps_its_worker(
    app: FastAPI, engine: Engine, held_s: float, keeps: bool
) -> None:
    """A report answered before it has waited `SATURATED` of its longest wait costs no keep
    (its answer's lease counts its worker); one that waits that long is kept, with the
    others that waited as long, in one keep."""
    max_wait_s = 0.5 / SATURATED  # a saturated lane's reports wait 0.5 s, none is shed
    kept: list[list[str]] = []

    def keep(session: Session, reporter_ids: list[str], kept_s: float) -> set[str]:
        kept.append(reporter_ids)
        return reporters.keep(session, reporter_ids, kept_s, clock=time.time, interval_s=1.0)

    lanes, reports = (
        ReportLanes(
            state_of(app).sessions, max_wait_s=max_wait_s, interval_s=1.0, silent_s=10.0, keep=keep
        ),
        Reports(),
    )
    with Session(engine) as session, session.begin():
        lease_until = datetime.now(UTC) + timedelta(seconds=10)
        session.add_all(
            QuotaReporter(reporter_id=r, role="job", lease_until=lease_until) for r in WAIT
        )

    async def run() -> list[bytes | BaseException]:
        first = asyncio.ensure_future(
            lanes.submit("t/ns", "first", reports.store("first", first=True))
        )
        await asyncio.to_thread(reports.first_started.wait, 10)
        queued = [asyncio.ensure_future(lanes.submit("t/ns", r, reports.store(r))) for r in WAIT]
        await asyncio.sleep(held_s)
        reports.release_first.set()
        answers = await asyncio.gather(first, *queued, return_exceptions=True)
        # Past when a keep of theirs would begin, and time for it to end (on SQLite it
        # waits for the batch's write).
        await asyncio.sleep(SATURATED * max_wait_s + 0.2)
        return answers

    assert asyncio.run(run()) == [b"first", b"worker", b"ghost"]
    assert kept == ([sorted(WAIT)] if keeps else [])


def test_a_workers_first_report_waits_in_line_longer_before_it_is_shed(
    app: FastAPI, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker not yet counted runs nothing before its first answer: its report waits up
    to `JOIN_WAIT_S` (here 0.6 s), where a later report is shed at ``max_wait_s``."""
    monkeypatch.setattr(lanes_module, "JOIN_WAIT_S", 0.6)
    lanes = ReportLanes(state_of(app).sessions, max_wait_s=0.2, interval_s=1.0, silent_s=10.0)

    async def held_for(seconds: float, *queued: tuple[str, bool]) -> list[bytes | BaseException]:
        reports = Reports()
        first = asyncio.ensure_future(
            lanes.submit("t/ns", "first", reports.store(f"first{seconds}", first=True))
        )
        await asyncio.to_thread(reports.first_started.wait, 10)
        waiting = [
            asyncio.ensure_future(lanes.submit("t/ns", r, reports.store(r), joins=joins))
            for r, joins in queued
        ]
        await asyncio.sleep(seconds)
        reports.release_first.set()
        return await asyncio.gather(first, *waiting, return_exceptions=True)

    _, steady, joiner = asyncio.run(held_for(0.3, ("steady", False), ("joiner", True)))
    assert isinstance(steady, ServiceUnavailable) and "over 0.2 s" in steady.reason
    assert joiner == b"joiner"
    _, late = asyncio.run(held_for(0.8, ("late", True)))
    assert isinstance(late, ServiceUnavailable) and "over 0.6 s" in late.reason
    assert stored(engine) == ["first0.3", "first0.8", "joiner"]


def test_a_namespace_whose_workers_are_gone_has_no_pace_left(app: FastAPI) -> None:
    lanes, reports = (
        ReportLanes(state_of(app).sessions, max_wait_s=60, interval_s=1.0, silent_s=0.2),
        Reports(),
    )

    async def run() -> None:
        assert await lanes.submit("t/a", "w1", reports.store("w1")) == b"w1"
        assert set(lanes.paces()) == {"t/a"}
        await asyncio.sleep(0.3)  # w1, silent past its lease, is gone: t/a's pace with it
        assert await lanes.submit("t/b", "w2", reports.store("w2")) == b"w2"
        assert lanes.paces() == {"t/b": 0.0}

    asyncio.run(run())
