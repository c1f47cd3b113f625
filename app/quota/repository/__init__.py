"""Every query of usage reporting, by name: what it takes and what it gives back.

Each statement is built beside the method that runs it, once per dialect (``functools.cache``):
built once, a statement is also compiled once (SQLAlchemy caches the compiled form by its
structure), which matters to the many small reports of Spark workers: building and compiling
them afresh cost more than running them. On PostgreSQL a set of keys is two array parameters
however many there are, and a report's rows, its groups' summaries and their new markers are
each written by one statement over arrays, one per column: a broker's report writes thousands
of each, which as many statements cost the database and the driver more than the writing
itself (SQLite writes them row by row). Core selects of just the columns needed (no ORM
objects), because a report may carry thousands of namespaces. The rows come back in the
shapes the store works with, so that the store reads as steps (look up, plan, settle, write,
answer) rather than as SQL.
"""

from __future__ import annotations

import weakref

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.quota.repository.admin import AdminQueries
from app.quota.repository.base import GroupRow, _Shared
from app.quota.repository.groups import Saved
from app.quota.repository.reporters import Claim, Claimed
from app.quota.repository.rows import Peer, RowQueries, Written

__all__ = ["Claim", "Claimed", "GroupRow", "Peer", "Saved", "UsageRepository", "Written"]

_SHARED = "usage_reports"


class UsageRepository(AdminQueries, RowQueries):
    """The queries of usage reporting on one connection (a report's transaction).

    Results of thousands of rows are fetched whole (``.all()``): iterated, a result fetches
    them from the driver one at a time."""

    __slots__ = ("connection", "postgresql", "shared")

    def __init__(self, connection: Connection, shared: _Shared | None = None) -> None:
        self.connection = connection
        self.postgresql = connection.dialect.name == "postgresql"
        self.shared = shared

    @classmethod
    def of(cls, session: Session) -> UsageRepository:
        """On the session's connection: plain rows, not the ORM's result machinery."""
        connection = session.connection()  # begins the transaction, if none has begun
        transaction = session.get_transaction()
        assert transaction is not None  # begun above
        shared: _Shared | None = session.info.get(_SHARED)
        if shared is None or shared.transaction() is not transaction:
            shared = session.info[_SHARED] = _Shared(weakref.ref(transaction))
        return cls(connection, shared)
