"""Dialect helpers for the two databases the store runs on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import CursorResult, Executable
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert(session: Session, table: Any) -> Any:
    """An INSERT that supports ``on_conflict_do_nothing`` on both SQLite and PostgreSQL."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def rowcount(session: Session, statement: Executable) -> int:
    """Run an INSERT, UPDATE or DELETE and return how many rows it touched."""
    # SQLAlchemy reports an INSERT's rowcount as -1 on PostgreSQL unless asked to keep it.
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        statement, execution_options={"preserve_rowcount": True}
    )
    return result.rowcount
