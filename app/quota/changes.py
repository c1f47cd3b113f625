"""Changes pushed to workers: ``GET /quota/v1/changes``, a long poll answered as soon as the
admin generation (`app.generation`) or the wake of a group it names (`app.quota.leases`)
moves, or after the wait it asked for; the worker then reports at once. Each server process
reads both every `POLL_S` while anyone waits, in one read for all its waiters.
Why: docs/design.md ("Leases and pushes").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from starlette.concurrency import run_in_threadpool

from app.outage_log import OutageLog
from app.quota.tuning import POLL_S

__all__ = ["ChangeWatch", "Reading"]

logger = logging.getLogger(__name__)

Reading = tuple[int, dict[str, int]]
"""The admin generation, and the wake of each group asked about (0 for one with no row)."""


class ChangeWatch:
    """One process's view of the admin generation and of the watched groups' wakes, for the
    requests waiting on them.

    `read` reads them from the database for the groups given (it blocks: it runs in the
    thread pool).
    """

    def __init__(self, read: Callable[[Sequence[str]], Reading], *, poll_s: float = POLL_S) -> None:
        self._read = read
        self._poll_s = poll_s
        self._generation = 0
        self._wakes: dict[str, int] = {}
        self._watched: Counter[str] = Counter()  # groups, by how many waiters watch each
        self._changed = asyncio.Event()
        self._waiters = 0
        self._poller: asyncio.Task[None] | None = None
        self._outage = OutageLog(
            logger, "could not read the admin generation", "the admin generation is read again"
        )

    async def wait(
        self, after: int | None, wakes: Mapping[str, int | None], timeout_s: float
    ) -> Reading:
        """The generation and the groups' wakes once the generation is above `after` or a
        group's wake is not the one given (at once for None), or after `timeout_s` seconds
        whatever they are (the generation only grows: a caller that saw a higher one
        elsewhere waits for this process to see it too)."""
        polling = self._poller is not None and not self._poller.done()
        if not polling or any(group not in self._wakes for group in wakes):
            self._seen(await run_in_threadpool(self._read, list(wakes)))
        if self._news(after, wakes):
            return self._reading(wakes)
        self._waiters += 1
        self._watched.update(wakes)
        if self._poller is None or self._poller.done():  # checked again: the read awaited
            self._poller = asyncio.create_task(self._poll())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while not self._news(after, wakes):
                        await self._changed.wait()
        finally:
            self._waiters -= 1
            self._watched.subtract(wakes)
            for group in wakes:
                if self._watched[group] <= 0:
                    del self._watched[group]
        return self._reading(wakes)

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    def _news(self, after: int | None, wakes: Mapping[str, int | None]) -> bool:
        if after is None or self._generation > after:
            return True
        return any(seen is None or self._wakes.get(g, 0) != seen for g, seen in wakes.items())

    def _reading(self, wakes: Mapping[str, int | None]) -> Reading:
        return self._generation, {group: self._wakes.get(group, 0) for group in wakes}

    def _seen(self, reading: Reading) -> None:
        """Take in a reading: the generation only grows, so an older one changes nothing; a
        newer one, or a group's wake that moved, wakes every waiter. (A wake may also fall,
        when a deleted group is made again: that is news too.)"""
        generation, wakes = reading
        news = generation > self._generation
        self._generation = max(generation, self._generation)
        for group, wake in wakes.items():
            news = news or self._wakes.get(group) not in (None, wake)
            self._wakes[group] = wake
        for group in [group for group in self._wakes if group not in self._watched]:
            if group not in wakes:
                del self._wakes[group]  # nobody watches it any more
        if news:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _poll(self) -> None:
        while self._waiters:
            await asyncio.sleep(self._poll_s)
            try:
                reading = await run_in_threadpool(self._read, list(self._watched))
            except Exception as exc:  # the database is away: the waiters time out meanwhile
                self._outage.failed(exc)
                continue
            self._outage.succeeded()
            self._seen(reading)
