"""Running a request's database work: one transaction, in one trip to the thread pool."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request
from sqlalchemy.orm import Session

__all__ = ["Session", "read", "write"]
from starlette.concurrency import run_in_threadpool

from app.db import begin_write

T = TypeVar("T")


async def read(request: Request, work: Callable[[Session], T]) -> T:
    """Run ``work(session)`` in the thread pool and return what it returns."""
    return await run_in_threadpool(_run, request, work, False)


async def write(request: Request, work: Callable[[Session], T]) -> T:
    """Run ``work(session)`` as one transaction: committed if it returns, rolled back if not."""
    return await run_in_threadpool(_run, request, work, True)


def _run(request: Request, work: Callable[[Session], T], writes: bool) -> T:
    # Endpoints are async and call this once: the session opens, works and closes within
    # one thread, so a request never holds a connection while waiting for a thread (which
    # deadlocks once every thread waits for a connection held by a request without one).
    with request.app.state.sessionmaker() as session:
        try:
            if writes:
                begin_write(session)
            result = work(session)
            if writes:
                session.commit()
        except BaseException:
            session.rollback()
            raise
        return result
