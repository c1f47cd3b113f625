"""ResourceGroup reads served from memory for as long as nothing they come from has changed.

The hottest read of the API, ``GET /admin/v2/resourcegroups/{rg}``, then costs no thread-pool
trip and no session: on SQLite one ``PRAGMA data_version`` on the cache's own connection, on
PostgreSQL a share of one reading of the admin generation. An entry holds a group's rates and
the admin roles that may read it (`GroupEntry`); it is never served after a write that changed
either has committed, whichever process made the write, because every lookup first learns
what changed since:

- **SQLite**: ``PRAGMA data_version`` on a connection of the cache's own that never writes
  changes whenever any other connection, in this process or another, commits; a lookup asks
  it on the event loop's thread. When it has, the triggers' log of groups whose reading a
  write may have changed (`app.models.ResourceGroupChange`), read on that connection too,
  names which entries to drop: a write drops the entries of the groups it touched, not every
  entry.
- **PostgreSQL**: the admin generation (`app.generation`), which every committed write to
  groups, tenants, namespaces or the default group changes; when it moved, every entry is
  dropped. Reading it takes a round trip, so lookups share them (`GenerationWatch`): each
  waits for the first reading *started after it arrived*, which sees every write committed
  before it (so a read that follows a write's answer, at any process, sees the write), and
  one reading serves every lookup that arrived while the one before was under way. While the
  generation cannot be read, nothing is served from memory.

An entry read from the database is kept only if nothing dropped it since the lookup that
missed it (`put`): a write that committed in between can make an entry go early, never stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.outage_log import OutageLog
from app.schemas import ResourceGroupRead
from app.services import resourcegroups

__all__ = ["GenerationWatch", "GroupCache", "GroupEntry", "group_cache_for", "load_entry"]

logger = logging.getLogger(__name__)

MAX_ENTRIES = 100_000  # groups remembered; the oldest entry goes first beyond it


@dataclass(frozen=True, slots=True)
class GroupEntry:
    group: ResourceGroupRead | None
    """None when the group does not exist."""
    readers: frozenset[str]
    """Admin roles of the tenants using the group, who may read it besides superusers."""


def load_entry(session: Session, name: str) -> GroupEntry:
    group = resourcegroups.find(session, name)
    return GroupEntry(
        None if group is None else resourcegroups.to_read(group),
        resourcegroups.readers(session, name),
    )


class GroupCache(Protocol):
    async def lookup(self, name: str) -> tuple[GroupEntry | None, int | None]:
        """The entry if it is still current, and a token to `put` a fresh one with
        (None: nothing may be kept)."""
        ...

    def put(self, name: str, entry: GroupEntry, token: int | None) -> None:
        """Keep an entry read after the `lookup` that gave ``token``, unless something
        dropped it since."""
        ...


class NoCache:
    """Every read goes to the database (an in-memory SQLite, which no one else can write)."""

    async def lookup(self, name: str) -> tuple[GroupEntry | None, int | None]:
        return None, None

    def put(self, name: str, entry: GroupEntry, token: int | None) -> None:
        pass


class _Entries:
    """Entries, and when each was last dropped, counted in drops (the tokens of `put`)."""

    def __init__(self) -> None:
        self.entries: dict[str, GroupEntry] = {}
        self.drops = 0
        self.cleared_at = 0
        self.dropped_at: dict[str, int] = {}

    def get(self, name: str) -> GroupEntry | None:
        return self.entries.get(name)

    def drop(self, name: str) -> None:
        self.drops += 1
        self.entries.pop(name, None)
        self.dropped_at[name] = self.drops

    def clear(self) -> None:
        self.drops += 1
        self.entries.clear()
        self.dropped_at.clear()
        self.cleared_at = self.drops

    def put(self, name: str, entry: GroupEntry, token: int) -> None:
        if self.cleared_at > token or self.dropped_at.get(name, 0) > token:
            return
        if len(self.entries) >= MAX_ENTRIES and name not in self.entries:
            del self.entries[next(iter(self.entries))]
        self.entries[name] = entry


class SQLiteGroupCache:
    """Per-group invalidation from the triggers' log: see the module's docstring."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        # Used only from the event loop's thread, in autocommit mode: no transaction is
        # ever left open on it, which would freeze what it sees.
        self._connection = connection
        self._entries = _Entries()
        self._data_version: int | None = None
        self._seq = 0
        """The last log entry taken into account; 0 before any."""

    async def lookup(self, name: str) -> tuple[GroupEntry | None, int | None]:
        self._catch_up()
        return self._entries.get(name), self._entries.drops

    def put(self, name: str, entry: GroupEntry, token: int | None) -> None:
        if token is not None:
            self._entries.put(name, entry, token)

    def _catch_up(self) -> None:
        version: int = self._connection.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        # Read after the version: a write committed in between is in the log already, and
        # moves the version once more (read again next time, for nothing).
        self._data_version = version
        rows = self._connection.execute(
            "SELECT seq, resource_group FROM resource_group_changes WHERE seq >= ? ORDER BY seq",
            (self._seq,),
        ).fetchall()
        # The log's numbers start at 1 and are never reused, and it keeps only the latest
        # entries: unless it still holds the last one taken into account (or, before any,
        # starts at 1), entries this process never saw are gone, and with them which
        # groups changed.
        if self._seq:
            complete = bool(rows) and rows[0][0] == self._seq
        else:
            complete = not rows or rows[0][0] == 1
        if not complete:
            self._entries.clear()
        for seq, group in rows:
            if seq > self._seq:
                self._entries.drop(group)
        if rows:
            self._seq = rows[-1][0]


class PostgresGroupCache:
    """Whole-cache invalidation on a moved admin generation: see the module's docstring."""

    def __init__(self, watch: GenerationWatch) -> None:
        self._watch = watch
        self._entries = _Entries()
        self._generation: int | None = None

    async def lookup(self, name: str) -> tuple[GroupEntry | None, int | None]:
        generation = await self._watch.current()
        if generation is None:
            return None, None
        if generation != self._generation:
            self._entries.clear()
            self._generation = generation
        return self._entries.get(name), self._entries.drops

    def put(self, name: str, entry: GroupEntry, token: int | None) -> None:
        if token is not None:
            self._entries.put(name, entry, token)


_GENERATION_SQL = "SELECT coalesce(sum(changes), 0)::bigint FROM admin_changes"
IDLE_S = 10.0  # the reading thread and its connection go after this long without a lookup
RETRY_AFTER_FAILURE_S = 1.0  # while the database is away, readings are not even tried
# Tried once a second through an outage: a line when it starts, a minute, and when it ends.
_OUTAGE = OutageLog(
    logger, "read cache off: cannot read the admin generation", "read cache on again"
)


class GenerationWatch:
    """The admin generation on PostgreSQL, read on a connection and in a thread of its own
    for lookups from any event loop: each gets the first reading started after it asked, and
    one reading answers every lookup that asked while the one before was under way. None
    when it cannot be read (the connection is lost, the database is down).
    """

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._asked = threading.Condition(self._lock)
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int | None]]] = []
        self._running = False
        self._failed_at = float("-inf")

    @classmethod
    def for_engine(cls, engine: Engine) -> GenerationWatch:
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        kwargs = {
            **kwargs,
            "autocommit": True,  # each reading its own snapshot
            "connect_timeout": 5,
            "application_name": "resourcegroups-read-cache",
        }
        return cls(lambda: psycopg.connect(*args, **kwargs))

    async def current(self) -> int | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int | None] = loop.create_future()
        with self._lock:
            self._waiting.append((loop, future))
            if self._running:
                self._asked.notify()
            else:
                self._running = True
                threading.Thread(target=self._serve, name="generation-watch", daemon=True).start()
        return await future

    def _serve(self) -> None:
        connection: psycopg.Connection[Any] | None = None
        try:
            while True:
                with self._lock:
                    while not self._waiting:
                        if not self._asked.wait(IDLE_S) and not self._waiting:
                            self._running = False
                            return
                    # Every lookup in this batch asked before the reading below starts.
                    batch, self._waiting = self._waiting, []
                generation, connection = self._read(connection)
                _answer(batch, generation)
        finally:
            if connection is not None:
                connection.close()

    def _read(
        self, connection: psycopg.Connection[Any] | None
    ) -> tuple[int | None, psycopg.Connection[Any] | None]:
        if connection is None and time.monotonic() - self._failed_at < RETRY_AFTER_FAILURE_S:
            return None, None
        try:
            if connection is None:
                connection = self._connect()
            row = connection.execute(_GENERATION_SQL, prepare=True).fetchone()
            if row is None:  # pragma: no cover - an aggregate always has a row
                raise psycopg.DataError("no generation")
            _OUTAGE.succeeded()
            return int(row[0]), connection
        except psycopg.Error as exc:
            _OUTAGE.failed(exc)
            self._failed_at = time.monotonic()
            if connection is not None:
                connection.close()
            return None, None


def _answer(
    batch: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int | None]]],
    generation: int | None,
) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[int | None]]] = {}
    for loop, future in batch:
        by_loop.setdefault(loop, []).append(future)
    for loop, futures in by_loop.items():
        # A closed loop raises RuntimeError: no one waits there any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve, futures, generation)


def _resolve(futures: list[asyncio.Future[int | None]], generation: int | None) -> None:
    for future in futures:
        if not future.done():  # a cancelled request's lookup is done already
            future.set_result(generation)


def group_cache_for(engine: Engine) -> GroupCache:
    if engine.dialect.name == "postgresql":
        return PostgresGroupCache(GenerationWatch.for_engine(engine))
    database = engine.url.database
    if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
        return NoCache()
    connection = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
    return SQLiteGroupCache(connection)
