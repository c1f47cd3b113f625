"""Database work run as one transaction, in one trip to the thread pool.

A transaction that PostgreSQL aborts because it deadlocked with another or could not be
serialized with one did nothing, and the same work run again a moment later succeeds: such
aborts are retried here (a few times, after a short random pause, so the transactions that
collided do not collide again), and never reach the client as a database outage. Should
every attempt collide, the answer says so: 503 with ``Retry-After``, the status HTTP clients
retry by themselves, and a reason naming the conflict. Not 409: in Pulsar's API a 409 says
the resource is in a state that refuses the request (a tenant that exists, one that still has
namespaces), and a client would take it for that and not retry.

Endpoints reach it through `app.api.deps` (``read``, ``write``); work that is not one
request's (report lanes, upkeep) calls `transaction` and `looking` here.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.db import begin_write
from app.errors import ServiceUnavailable
from app.outage_log import OutageLog

__all__ = [
    "ATTEMPTS",
    "DATABASE_OUTAGE",
    "WriteConflict",
    "is_outage",
    "is_retryable",
    "looking",
    "transaction",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

# While the database is down every request and every upkeep loop fails: one line when that
# starts, one a minute while it lasts, one when a transaction commits again.
DATABASE_OUTAGE = OutageLog(
    logging.getLogger("app.database"), "database unavailable", "database available again"
)
# SQLSTATE classes of a database that cannot serve at all: connection exceptions, lack of
# resources (disk, memory, connections), operator intervention (shutting down, starting up),
# system errors. Others (a statement too complex, a constraint) are this request's alone.
OUTAGE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58"})

# SQLSTATEs of a transaction aborted for colliding with another: serialization_failure,
# deadlock_detected. Nothing of it was written, so it can run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
ATTEMPTS = 8
# The pause before attempt n+1 is random, up to BACKOFF_S * 2**n: at most about 1.3 s in all.
BACKOFF_S = 0.005


class WriteConflict(ServiceUnavailable):
    headers = MappingProxyType({"Retry-After": "1"})


CONFLICT_REASON = (
    f"The request collided with concurrent writes {ATTEMPTS} times in a row "
    "(deadlock or serialization failure); nothing was written, retry it"
)


async def transaction(
    sessions: sessionmaker[Session],
    func: Callable[Concatenate[Session, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``func(session, *args, **kwargs)`` as one transaction: committed if it returns,
    rolled back if not."""
    return await run_in_threadpool(_run, sessions, _given_session(func, args, kwargs), True)


async def looking(
    sessions: sessionmaker[Session],
    func: Callable[Concatenate[Session, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``func(session, *args, **kwargs)`` in a session that writes nothing."""
    return await run_in_threadpool(_run, sessions, _given_session(func, args, kwargs), False)


def _given_session(
    func: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[Session], T]:
    """The call, waiting for its session (`_run` may make it again after a collision)."""
    return lambda session: func(session, *args, **kwargs)


def is_outage(exc: DBAPIError) -> bool:
    """Whether `exc` says the database cannot serve (lost, refusing, shutting down), rather
    than that this one statement failed. SQLite's operational errors (locked, the file gone)
    carry no SQLSTATE and count as outages."""
    if exc.connection_invalidated or isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate is None or sqlstate[:2] in OUTAGE_SQLSTATE_CLASSES


def is_retryable(exc: DBAPIError) -> bool:
    """Whether the database aborted the transaction for colliding with another one."""
    return getattr(exc.orig, "sqlstate", None) in RETRYABLE_SQLSTATES


class _ConnectionLost(Exception):
    """The pooled connection was found closed before the transaction could commit."""

    def __init__(self, error: DBAPIError) -> None:
        self.error = error


def _run(sessions: sessionmaker[Session], work: Callable[[Session], T], writes: bool) -> T:
    attempt = 1
    reconnected = False
    while True:
        try:
            result = _attempt(sessions, work, writes)
        except _ConnectionLost as lost:
            # The database closed the connection while it sat in the pool (it restarted, or
            # a proxy dropped it idle): nothing was committed, so the work runs once more on
            # a new connection (the engine let go of every connection older than the error).
            # Checking each connection before use instead cost a round trip per transaction.
            if reconnected:
                raise lost.error from None
            reconnected = True
        except DBAPIError as exc:
            if not is_retryable(exc):
                raise
            if attempt == ATTEMPTS:
                logger.warning("gave up after %d collisions: %s", attempt, exc.orig)
                raise WriteConflict(CONFLICT_REASON) from exc
            time.sleep(random.uniform(0, BACKOFF_S * 2**attempt))
            attempt += 1
        else:
            DATABASE_OUTAGE.succeeded()
            return result


def _attempt(sessions: sessionmaker[Session], work: Callable[[Session], T], writes: bool) -> T:
    # Endpoints are async and call this once: the session opens, works and closes within
    # one thread, so a request never holds a connection while waiting for a thread (which
    # deadlocks once every thread waits for a connection held by a request without one).
    with sessions() as session:
        committing = False
        try:
            if writes:
                begin_write(session)
            result = work(session)
            if writes:
                committing = True
                session.commit()
        except DBAPIError as exc:
            session.rollback()
            # Lost while committing, the commit may have happened: that is not retried.
            if exc.connection_invalidated and not committing:
                raise _ConnectionLost(exc) from exc
            raise
        except BaseException:
            session.rollback()
            raise
        return result
