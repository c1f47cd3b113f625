"""Reports of one namespace, from one server process, stored together: one transaction of up to
`MAX_BATCH` each time the namespace's lane comes free. A report that waited ``max_wait_s`` is
answered 503, saying how long its worker is kept counted alive (`KEPT_HEADER`, `Keeps`); a
first report may wait `JOIN_WAIT_S`; the lane paces its workers (`app.quota.pacing`).
Why: docs/design.md ("Crowds: lanes and pacing").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from app import transactions
from app.access import Principal
from app.errors import AppError, ServiceUnavailable
from app.quota import store
from app.quota.pacing import Pace, spread
from app.quota.schemas import UsageReport
from app.quota.store import Claim, Claimed, Serving, claim_all
from app.quota.tuning import JOIN_WAIT_S, MAX_BATCH, SATURATED
from rgspark.wire import KEPT_HEADER


class Work(Protocol):
    """A report's work on a session: its answer, which asks for no report sooner than
    ``pace_s`` (`app.quota.pacing`), given what the report claims (`Claims`) and what its
    batch's statement claimed for it (None: not claimed yet)."""

    def __call__(
        self, session: Session, *, pace_s: float, claim: Claim | None, ahead: Claimed | None
    ) -> bytes: ...


class Keeps(Protocol):
    """Keep the given reporters counted alive for ``kept_s`` (then the grace) from now;
    returns those kept (the others are gone, or never reported)."""

    def __call__(self, session: Session, reporter_ids: list[str], kept_s: float) -> set[str]: ...


class Claims(Protocol):
    """What a report's work claims of its reporter first, given the same ``pace_s``
    (`app.quota.store.claim`)."""

    def __call__(self, *, pace_s: float) -> Claim | None: ...


@dataclass
class _Report:
    reporter_id: str
    work: Work
    joins: bool
    """Whether it is its worker's first to the process (the pace does not hold those back)."""
    claims: Claims | None
    kept: bool | None = None
    """Whether its worker is kept alive while it waits (`Keeps`), or not counted alive at
    all; None: not known (no keep ran)."""
    looked: asyncio.Event | None = None
    """Set once the keep asked for it ended (None: none was asked)."""
    queued_at: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    answer: asyncio.Future[bytes] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ReportLanes:
    """A queue per namespace with a report waiting or being stored (none otherwise)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        max_wait_s: float,
        interval_s: float,
        silent_s: float,
        keep: Keeps | None = None,
    ) -> None:
        """``max_wait_s``: how long a report may wait; ``interval_s``: the report interval;
        ``silent_s``: how long a live worker may go without reporting (`Pace`); ``keep``:
        how the workers of waiting reports are kept alive (None: they are not)."""
        self.sessions = sessions
        self.keep = keep
        self.max_wait_s = max_wait_s
        # A lane whose reports wait this long is saturated: it paces its workers, and keeps
        # those of the reports that waited as long alive.
        self.saturated_s = SATURATED * max_wait_s
        self.interval_s = interval_s
        self.silent_s = silent_s
        self._waiting: dict[str, list[_Report]] = {}
        self._draining: set[asyncio.Task[None]] = set()
        self._paces: dict[str, Pace] = {}
        self._keeping: dict[str, list[_Report]] = {}

    async def report(
        self,
        serving: Serving,
        *,
        principal: Principal,
        reporter_id: str,
        report: UsageReport,
        now: float,
    ) -> bytes:
        """Store a usage report (`app.quota.store.submit`) in its namespace's lane, or
        alone when it names several, and answer it (JSON): what it claims of its reporter
        claimed with its batch's."""
        claims = partial(
            store.claim,
            serving,
            principal=principal,
            reporter_id=reporter_id,
            report=report,
            now=now,
        )
        work = partial(store.submit, serving=serving, **claims.keywords)
        lane = next(iter(report.namespaces)) if len(report.namespaces) == 1 else None
        # Not answered by this process lately: its first report, as far as it knows.
        joins = serving.cache.lease(reporter_id) is None
        return await self.submit(lane, reporter_id, work, joins=joins, claims=claims)

    async def submit(
        self,
        namespace: str | None,
        reporter_id: str,
        work: Work,
        *,
        joins: bool = False,
        claims: Claims | None = None,
    ) -> bytes:
        """Store a report of ``reporter_id`` in the namespace's lane (at once, alone, without
        one); ``joins``: it is its worker's first to the process (until one is answered);
        ``claims``: what its work claims first, claimed with its batch's."""
        if namespace is None:
            claim = claims(pace_s=0.0) if claims else None
            return await transactions.transaction(
                self.sessions, work, pace_s=0.0, claim=claim, ahead=None
            )
        now = asyncio.get_running_loop().time()
        pace = self._paces.get(namespace)
        if pace is None:
            self._forget_idle(now)
            pace = self._paces[namespace] = Pace(self.interval_s, self.silent_s, now)
        pace.heard(reporter_id, now)
        report = _Report(reporter_id, work, joins, claims)
        waiting = self._waiting.get(namespace)
        if waiting is not None:
            waiting.append(report)
            self._keep(namespace, report)
        else:
            self._waiting[namespace] = [report]
            # A task of its own, not this request's: a report that is cancelled (its worker
            # went away) does not strand the ones queued behind it.
            task = asyncio.create_task(self._drain(namespace))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
        return await report.answer

    async def _drain(self, namespace: str) -> None:
        waiting = self._waiting[namespace]
        pace = self._paces[namespace]
        clock = asyncio.get_running_loop().time
        try:
            while waiting:
                await self._looked_at(waiting)
                self._shed(waiting)
                batch = waiting[:MAX_BATCH]
                del waiting[:MAX_BATCH]
                if batch:
                    started = clock()
                    took = await self._store(batch, pace.pace_s)
                    ended = clock()
                    # Saturated: its reports wait long enough to be shed soon.
                    saturated = started - batch[0].queued_at >= self.saturated_s
                    pace.stored(
                        [report.reporter_id for report in batch],
                        ended - started,
                        ended,
                        saturated=saturated,
                        # A worker's first report is not held back, and costs several times
                        # more (its rows are made, its group summarized anew).
                        held_back=[t for t, r in zip(took, batch, strict=True) if not r.joins],
                    )
        finally:
            del self._waiting[namespace]
            for report in waiting:  # only when cancelled, at shutdown
                report.answer.cancel()

    def paces(self) -> dict[str, float]:
        """Each namespace's pace (seconds; 0: none), while it has workers alive."""
        return {namespace: pace.pace_s for namespace, pace in self._paces.items()}

    def _forget_idle(self, now: float) -> None:
        """Forget the paces of namespaces whose workers are all gone (looked at as another
        namespace's begins: a pace goes on only while its workers report)."""
        for namespace, pace in list(self._paces.items()):
            pace.forget_gone(now)
            if pace.idle and namespace not in self._waiting:
                del self._paces[namespace]

    def _keep(self, namespace: str, report: _Report) -> None:
        """Keep the report's worker alive once it has waited `SATURATED` of its longest wait
        (one keep in flight per lane, for all that waited as long meanwhile). One answered
        sooner needs none: its answer's lease counts its worker, while a keep costs a
        transaction (keeping every report that waited at all ran one beside every other
        batch at 500 reports a second)."""
        if self.keep is None:
            return
        report.looked = asyncio.Event()
        keeping = self._keeping.get(namespace)
        if keeping is not None:
            keeping.append(report)
            return
        self._keeping[namespace] = [report]
        task = asyncio.create_task(self._keep_all(namespace))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _looked_at(self, waiting: list[_Report]) -> None:
        """Wait for the keeps of the reports about to be shed, so that each one's 503 says
        whether its worker was kept: only theirs, not those of reports arriving meanwhile."""
        now = asyncio.get_running_loop().time()
        for report in [r for r in waiting if self._expired(r, now)]:
            if report.looked is not None:
                await report.looked.wait()

    def _patience(self, report: _Report) -> float:
        """How long ``report`` may wait: longer (`JOIN_WAIT_S`) for a worker's first, unless
        its worker turned out to be counted already (answered by another process), whose
        keep lasts ``max_wait_s``."""
        joins = report.joins and not report.kept
        return max(JOIN_WAIT_S, self.max_wait_s) if joins else self.max_wait_s

    def _expired(self, report: _Report, now: float) -> bool:
        return report.queued_at <= now - self._patience(report)

    async def _keep_all(self, namespace: str) -> None:
        assert self.keep is not None
        keeping, reports = self._keeping[namespace], []
        loop = asyncio.get_running_loop()
        try:
            while keeping:  # in the order they arrived
                await asyncio.sleep(keeping[0].queued_at + self.saturated_s - loop.time())
                reports = _settled(keeping, loop.time() - self.saturated_s)
                reporter_ids = sorted({r.reporter_id for r in reports if not r.answer.done()})
                if reporter_ids:
                    kept = await transactions.transaction(
                        self.sessions, self.keep, reporter_ids, self.max_wait_s
                    )
                    for report in reports:
                        report.kept = report.reporter_id in kept
                _looked(reports)
        except Exception:  # the database is down, say: those not kept are not known to be
            pass
        finally:  # those of a failed keep too: the drain waits for none forever
            _looked(reports + keeping)
            del self._keeping[namespace]

    def _shed(self, waiting: list[_Report]) -> None:
        """Answer the reports that waited too long with a 503, which says for how long its
        worker is kept alive where it is."""
        now = asyncio.get_running_loop().time()
        expired = [report for report in waiting if self._expired(report, now)]
        if not expired:
            return
        headers = {
            True: {KEPT_HEADER: str(round(self.max_wait_s * 1000))},
            False: {KEPT_HEADER: "0"},  # not counted: its share is others' already
            None: None,
        }
        for report in expired:
            reason = (
                f"Report not stored: it waited over {self._patience(report):g} s in line, "
                f"with {len(waiting)} reports of its namespace; report again after backing off"
            )
            _fail([report], ServiceUnavailable(reason, headers=headers[report.kept]))
        shed = {id(report) for report in expired}
        waiting[:] = [report for report in waiting if id(report) not in shed]

    async def _store(self, batch: list[_Report], pace_s: float) -> list[float]:
        """Store the batch; returns the seconds each report's work took (0 where it failed)."""
        try:
            done = await transactions.transaction(self.sessions, _store_all, batch, pace_s)
        except AppError as refused:
            if refused.status_code >= 500 or len(batch) == 1:
                _fail(batch, refused)
                return [0.0] * len(batch)
            # One report's own fault: each is stored again alone, to its own outcome.
            return [(await self._store([report], pace_s))[0] for report in batch]
        except Exception as error:  # the database is down, say: every report's answer
            _fail(batch, error)
            return [0.0] * len(batch)
        for report, (answer, _) in zip(batch, done, strict=True):
            if not report.answer.done():  # not cancelled meanwhile
                report.answer.set_result(answer)
        return [seconds for _, seconds in done]


def _store_all(session: Session, batch: list[_Report], pace_s: float) -> list[tuple[bytes, float]]:
    """Each report's answer, and the seconds its work took."""
    paces = [spread(pace_s) for _ in batch]
    claims = [r.claims(pace_s=p) if r.claims else None for r, p in zip(batch, paces, strict=True)]
    ahead: dict[str, Claimed] = {}
    if len(batch) > 1:
        # The batch's reporters claimed in one statement rather than one each, in one
        # order: reporters before groups, the order in which a report and a release lock
        # them (a batch's later reports would otherwise lock their reporter holding the
        # group). A reporter's first report takes what it was claimed as; a second claims
        # its own.
        ahead = claim_all(session, [claim for claim in claims if claim is not None])
    done = []
    for report, pace, claim in zip(batch, paces, claims, strict=True):
        started = time.perf_counter()
        took = ahead.pop(report.reporter_id, None) if claim is not None else None
        answer = report.work(session, pace_s=pace, claim=claim, ahead=took)
        done.append((answer, time.perf_counter() - started))
    return done


def _settled(keeping: list[_Report], since: float) -> list[_Report]:
    """Take out of ``keeping`` the reports waiting since ``since`` or earlier, and those
    that need no keep any more (answered)."""
    settled: list[_Report] = []
    left: list[_Report] = []
    for report in keeping:
        (settled if report.answer.done() or report.queued_at <= since else left).append(report)
    keeping[:] = left
    return settled


def _looked(reports: list[_Report]) -> None:
    for report in reports:
        if report.looked is not None:
            report.looked.set()


def _fail(batch: list[_Report], error: Exception) -> None:
    for report in batch:
        if not report.answer.done():
            report.answer.set_exception(error)
