"""Admin changes pushed to workers: a long poll on the admin generation.

A worker holds ``GET /quota/v1/changes?after=G`` open; it is answered as soon as the admin
generation (`app.generation`) is no longer ``G``, or after the wait it asked for with the
same one. The worker then reports at once, and its report plans with the new limits: so a
quota cut, a group attached or detached, or a new default group reaches every worker within
a fraction of a second, however long it would otherwise wait before its next report.

Every server process reads the generation itself, every `POLL_S` while anyone waits on it:
one indexed read for all its waiters, whatever their number, and it sees writes committed by
any process on the same database. (PostgreSQL's LISTEN would answer sooner, but needs a
connection held open per process, and SQLite has nothing like it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from app.outage_log import OutageLog

__all__ = ["MAX_WAIT_S", "POLL_S", "ChangeWatch"]

logger = logging.getLogger(__name__)

POLL_S = 0.2  # how often a process reads the generation while someone waits
MAX_WAIT_S = 60.0  # the longest a request may ask to wait


class ChangeWatch:
    """One process's view of the admin generation, for the requests waiting on it.

    `read_generation` reads it from the database (it blocks: it runs in the thread pool).
    """

    def __init__(self, read_generation: Callable[[], int], *, poll_s: float = POLL_S) -> None:
        self._read = read_generation
        self._poll_s = poll_s
        self._generation = 0
        self._changed = asyncio.Event()
        self._waiters = 0
        self._poller: asyncio.Task[None] | None = None
        self._outage = OutageLog(
            logger, "could not read the admin generation", "the admin generation is read again"
        )

    async def wait(self, after: int | None, timeout_s: float) -> int:
        """The generation once it is above `after` (at once for None), or after
        `timeout_s` seconds whatever it is (it only grows: a caller that saw a higher one
        elsewhere waits for this process to see it too)."""
        polling = self._poller is not None and not self._poller.done()
        if polling:  # read by the poller within `POLL_S`
            generation = self._generation
        else:
            generation = self._seen(await run_in_threadpool(self._read))
        if after is None or generation > after:
            return generation
        self._waiters += 1
        if self._poller is None or self._poller.done():  # checked again: the read awaited
            self._poller = asyncio.create_task(self._poll())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while self._generation <= after:
                        await self._changed.wait()
        finally:
            self._waiters -= 1
        return self._generation

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    def _seen(self, generation: int) -> int:
        """Take in a reading: the generation only grows, so an older reading changes
        nothing; a newer one wakes every waiter."""
        if generation > self._generation:
            self._generation = generation
            self._changed.set()
            self._changed = asyncio.Event()
        return self._generation

    async def _poll(self) -> None:
        while self._waiters:
            await asyncio.sleep(self._poll_s)
            try:
                generation = await run_in_threadpool(self._read)
            except Exception as exc:  # the database is away: the waiters time out meanwhile
                self._outage.failed(exc)
                continue
            self._outage.succeeded()
            self._seen(generation)
