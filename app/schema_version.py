"""Whether a database's schema is the one this code was written for.

`rgadmin serve` refuses a database behind the code's migrations, and `/health` answers 503
on one: otherwise the server looks healthy while every request fails on a missing table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from app.db import migrations_directory

VERSION_TABLE = "alembic_version"  # where Alembic records the revisions a database is at


@dataclass(frozen=True)
class SchemaState:
    current: frozenset[str]  # the database's revisions: none when never migrated
    heads: frozenset[str]  # this code's latest revisions
    known: frozenset[str]  # every revision this code has a migration for

    @property
    def unknown(self) -> bool:
        """At a revision this code has no migration for: a newer release migrated it."""
        return not self.current <= self.known

    @property
    def behind(self) -> bool:
        """Missing migrations that this code has, which `rgadmin migrate` would run."""
        return not self.unknown and self.current != self.heads

    def describe(self) -> str:
        """One sentence on where the schema is, naming what to do when it is behind."""
        heads = _revisions(self.heads)
        if not self.current:
            return f"The database has no schema (this server needs {heads}): run `rgadmin migrate`"
        if self.behind:
            return (
                f"The database schema is at revision {_revisions(self.current)}, behind this "
                f"server's {heads}: run `rgadmin migrate`"
            )
        if self.unknown:
            return (
                f"The database schema is at revision {_revisions(self.current)}, which this "
                f"server (at {heads}) does not know: a newer release migrated it"
            )
        return f"The database schema is at this server's revision {heads}"


def _revisions(revisions: frozenset[str]) -> str:
    return ", ".join(sorted(revisions))


@dataclass(frozen=True)
class _Script:
    heads: frozenset[str]
    known: frozenset[str]


@cache
def _script() -> _Script:
    # Reading the migrations imports every one of them: once per process.
    script = ScriptDirectory(str(migrations_directory()))
    return _Script(
        heads=frozenset(script.get_heads()),
        known=frozenset(revision.revision for revision in script.walk_revisions()),
    )


def read_state(connection: Connection) -> SchemaState:
    """Where the database's schema is: one read of a one-row table, as cheap as ``SELECT 1``,
    for `/health`. A database never migrated has no such table; its transaction is then
    failed (on PostgreSQL), and only fit to be rolled back."""
    try:
        current = frozenset(connection.scalars(text(f"SELECT version_num FROM {VERSION_TABLE}")))
    except DBAPIError as exc:
        if not _no_version_table(exc):
            raise  # the database is down, or refuses us: not a question of schema
        current = frozenset()
    script = _script()
    return SchemaState(current=current, heads=script.heads, known=script.known)


def _no_version_table(error: DBAPIError) -> bool:
    # PostgreSQL's undefined_table, SQLite's message: a lookup in the catalog first would
    # cost a second query on every call.
    if getattr(error.orig, "sqlstate", None) == "42P01":
        return True
    return f"no such table: {VERSION_TABLE}" in str(error.orig)
