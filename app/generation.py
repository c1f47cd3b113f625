"""The admin generation: a number that changes with every committed write to groups,
tenants, namespaces and the default group, and only then (`app.models.AdminChanges` says
how the triggers keep it). Server processes hold what they remember of those tables (the
namespaces' groups of `app.quota.cache`, the group reads of `app.readcache`) while it holds.
"""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from app.models import COMPACTED_WRITER, admin_generation

__all__ = ["compact", "current"]

# Writers' rows whose backend is gone, folded into one row in one statement: the sum, and
# so the generation, stays what it was. A backend that got a departed one's process id
# meanwhile has its new changes folded in too (the DELETE waits for its row, then returns
# the row as that backend committed it).
_COMPACT = text(
    """
    WITH gone AS (
        DELETE FROM admin_changes
        WHERE writer <> :compacted
          AND writer NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
        RETURNING changes
    )
    INSERT INTO admin_changes (writer, changes)
    SELECT :compacted, sum(changes) FROM gone HAVING count(*) > 0
    ON CONFLICT (writer) DO UPDATE SET changes = admin_changes.changes + excluded.changes
    """
).bindparams(compacted=COMPACTED_WRITER)


def current(connection: Connection | Session) -> int:
    value: int = connection.execute(admin_generation()).scalar_one()
    return value


def compact(session: Session) -> None:
    """Fold the rows of writers that are gone into one (PostgreSQL: one row per backend
    process that ever wrote would otherwise pile up, and every reading sums them)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_COMPACT)
