"""ResourceGroup reads served from memory for as long as the database has not changed.

The hottest read of the API, ``GET /admin/v2/resourcegroups/{rg}``, then costs no thread-pool
trip and no query. Correctness rests on SQLite's ``PRAGMA data_version``: on a connection that
never writes, its value changes whenever any other connection, in this process or another,
commits. Every lookup checks it first (a few microseconds), so a read never returns what a
committed write replaced. On PostgreSQL there is no such cheap check, so nothing is cached and
reads go to the database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.schemas import ResourceGroupRead
from app.services import resourcegroups


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


class GroupCache:
    def __init__(self, data_version: Callable[[], int] | None) -> None:
        self._data_version = data_version
        self._entries: dict[str, GroupEntry] = {}
        self._seen: int | None = None

    @classmethod
    def for_engine(cls, engine: Engine) -> GroupCache:
        database = engine.url.database
        if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
            return cls(None)
        # A connection of its own that never writes, used only from the event loop thread.
        connection = sqlite3.connect(database, check_same_thread=False, isolation_level=None)

        def data_version() -> int:
            version: int = connection.execute("PRAGMA data_version").fetchone()[0]
            return version

        return cls(data_version)

    def lookup(self, name: str) -> tuple[GroupEntry | None, int | None]:
        """The cached entry if still valid, and the version to `put` a fresh one under."""
        version = self._version()
        return (None if version is None else self._entries.get(name)), version

    def _version(self) -> int | None:
        """The database's version now, dropping entries of an older one; None: do not cache."""
        if self._data_version is None:
            return None
        version = self._data_version()
        if version != self._seen:
            self._entries.clear()
            self._seen = version
        return version

    def put(self, name: str, entry: GroupEntry, version: int | None) -> None:
        """Keep an entry read at `version`, unless the database has moved on since."""
        if version is not None and version == self._seen:
            self._entries[name] = entry
