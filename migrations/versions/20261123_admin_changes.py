"""admin changes off the write path

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 10:00:00.000000

The admin generation was one row that triggers rewrote on every write to groups, tenants,
namespaces and the default group. On PostgreSQL every admin write therefore queued for that
row until it committed, and deadlocked with writes that lock a group row first. It becomes
a sum over `admin_changes`, one row per writer: the writing backend process on PostgreSQL,
which runs one transaction at a time, so no two concurrent writes wait for the same row.

On SQLite (one row: writers take turns there anyway) the triggers also log which groups a
write may change the reading of (`resource_group_changes`), so that a server process drops
only those from its read cache instead of all of it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN_TABLES = ("resource_groups", "tenants", "namespaces", "default_resource_group")
EVENTS = ("INSERT", "UPDATE", "DELETE")
LOG_KEPT = 1000  # entries of resource_group_changes kept (SQLite)

# A random positive amount per change: the sum rises with every commit and never comes back
# to an earlier value, even after rows are deleted by hand. The existing statement triggers
# (0004, 0005) call this function, so replacing it moves them all.
_POSTGRESQL_FUNCTION = """
CREATE OR REPLACE FUNCTION bump_admin_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO admin_changes (writer, changes)
    VALUES (pg_backend_pid(), 1 + floor(random() * 4294967296)::bigint)
    ON CONFLICT (writer) DO UPDATE SET changes = admin_changes.changes + excluded.changes;
    RETURN NULL;
END
$$
"""
_OLD_POSTGRESQL_FUNCTION = """
CREATE OR REPLACE FUNCTION bump_admin_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO admin_generation (id, token)
    VALUES (1, floor(random() * 9.2e18)::bigint)
    ON CONFLICT (id) DO UPDATE SET token = excluded.token;
    RETURN NULL;
END
$$
"""

# SQLite: the row comes back if something deleted it. INSERT OR REPLACE rather than an
# upsert, as before: an outer statement's ON CONFLICT clause governs its triggers' too.
_SQLITE_BUMP = (
    "INSERT OR REPLACE INTO admin_changes (writer, changes) VALUES (0, "
    "coalesce((SELECT changes FROM admin_changes WHERE writer = 0), 0) "
    "+ 1 + abs(random() % 4294967296));"
)
_OLD_SQLITE_BUMP = "INSERT OR REPLACE INTO admin_generation (id, token) VALUES (1, random());"

# The groups whose reading (rates; the admin roles of the tenants that use them, who may
# read them) a row's change may alter: see `app.services.attachments.tenant_uses`.
_DEFAULT = "SELECT resource_group FROM default_resource_group"
_AFFECTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("resource_groups", "INSERT"): ("NEW.name",),
    ("resource_groups", "UPDATE"): ("OLD.name", "NEW.name"),
    ("resource_groups", "DELETE"): ("OLD.name",),
    ("tenants", "INSERT"): ("NEW.resource_group",),
    ("tenants", "UPDATE"): (
        "OLD.resource_group",
        "NEW.resource_group",
        "SELECT resource_group FROM namespaces WHERE tenant = OLD.name",
        _DEFAULT,
    ),
    ("tenants", "DELETE"): (
        "OLD.resource_group",
        "SELECT resource_group FROM namespaces WHERE tenant = OLD.name",
        _DEFAULT,
    ),
    ("namespaces", "INSERT"): ("NEW.resource_group", _DEFAULT),
    ("namespaces", "UPDATE"): ("OLD.resource_group", "NEW.resource_group", _DEFAULT),
    ("namespaces", "DELETE"): ("OLD.resource_group", _DEFAULT),
    ("default_resource_group", "INSERT"): ("NEW.resource_group",),
    ("default_resource_group", "UPDATE"): ("OLD.resource_group", "NEW.resource_group"),
    ("default_resource_group", "DELETE"): ("OLD.resource_group",),
}


def _sqlite_log(table: str, event: str) -> str:
    first, *others = _AFFECTED[table, event]  # the first is a column of OLD or NEW
    selects = [f"SELECT {first} AS name"]
    selects += [part if part.startswith("SELECT") else f"SELECT {part}" for part in others]
    union = " UNION ".join(selects)
    return (
        "INSERT INTO resource_group_changes (resource_group) "
        f"SELECT name FROM ({union}) WHERE name IS NOT NULL; "
        "DELETE FROM resource_group_changes WHERE seq <= "
        f"(SELECT max(seq) FROM resource_group_changes) - {LOG_KEPT};"
    )


def _sqlite_triggers(suffix: str, body: str, *, log: bool) -> None:
    for table in ADMIN_TABLES:
        for event in EVENTS:
            statements = body + (" " + _sqlite_log(table, event) if log else "")
            op.execute(
                f"CREATE TRIGGER {table}_{event.lower()}_{suffix} "
                f"AFTER {event} ON {table} BEGIN {statements} END"
            )


def _drop_sqlite_triggers(suffix: str) -> None:
    for table in ADMIN_TABLES:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER {table}_{event.lower()}_{suffix}")


def upgrade() -> None:
    op.create_table(
        "admin_changes",
        sa.Column("writer", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("changes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("writer", name=op.f("pk_admin_changes")),
    )
    op.create_table(
        "resource_group_changes",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("resource_group", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_resource_group_changes")),
        sqlite_autoincrement=True,
    )
    # A value the old token never was: nothing remembered under it (the usage history's
    # last generation) is taken as current.
    op.execute(
        "INSERT INTO admin_changes (writer, changes) "
        "SELECT 0, abs(coalesce(max(token), 0)) + 1 FROM admin_generation"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRESQL_FUNCTION)
    else:
        _drop_sqlite_triggers("admin_generation")
        _sqlite_triggers("admin_changes", _SQLITE_BUMP, log=True)
    op.drop_table("admin_generation")


def downgrade() -> None:
    op.create_table(
        "admin_generation",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_admin_generation")),
    )
    op.execute("INSERT INTO admin_generation (id, token) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_OLD_POSTGRESQL_FUNCTION)
    else:
        _drop_sqlite_triggers("admin_changes")
        _sqlite_triggers("admin_generation", _OLD_SQLITE_BUMP, log=False)
    op.drop_table("resource_group_changes")
    op.drop_table("admin_changes")
