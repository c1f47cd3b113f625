"""quota change markers

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 03:50:00.000000

What lets a server process answer a usage report from what it remembers: a random token per
reporter that changes whenever its usage rows are written, a marker per group that changes
whenever the allocator's inputs for it change, and an admin generation token that database
triggers change on every write to groups, tenants and namespaces (triggers, so that no write
can forget it, whichever path it takes).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN_TABLES = ("resource_groups", "tenants", "namespaces")
EVENTS = ("INSERT", "UPDATE", "DELETE")

# A new random token; the row comes back if something deleted it.
_POSTGRESQL_FUNCTION = """
CREATE FUNCTION bump_admin_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO admin_generation (id, token)
    VALUES (1, floor(random() * 9.2e18)::bigint)
    ON CONFLICT (id) DO UPDATE SET token = excluded.token;
    RETURN NULL;
END
$$
"""
_SQLITE_BUMP = "INSERT OR REPLACE INTO admin_generation (id, token) VALUES (1, random());"


def upgrade() -> None:
    with op.batch_alter_table("quota_reporters", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("rows_token", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("quota_usage", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resource_group", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("planned_marker", sa.BigInteger(), nullable=True))
    op.create_table(
        "quota_groups",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("marker", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_quota_groups")),
    )
    with op.batch_alter_table("quota_groups", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_quota_groups_changed_at"), ["changed_at"], unique=False
        )
    op.create_table(
        "admin_generation",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_admin_generation")),
    )
    op.execute("INSERT INTO admin_generation (id, token) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRESQL_FUNCTION)
        for table in ADMIN_TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_admin_generation "
                f"AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION bump_admin_generation()"
            )
    else:
        for table in ADMIN_TABLES:
            for event in EVENTS:
                op.execute(
                    f"CREATE TRIGGER {table}_{event.lower()}_admin_generation "
                    f"AFTER {event} ON {table} BEGIN {_SQLITE_BUMP} END"
                )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in ADMIN_TABLES:
            op.execute(f"DROP TRIGGER {table}_admin_generation ON {table}")
        op.execute("DROP FUNCTION bump_admin_generation()")
    else:
        for table in ADMIN_TABLES:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER {table}_{event.lower()}_admin_generation")
    op.drop_table("admin_generation")
    op.drop_table("quota_groups")
    with op.batch_alter_table("quota_usage", schema=None) as batch_op:
        batch_op.drop_column("planned_marker")
        batch_op.drop_column("resource_group")
    with op.batch_alter_table("quota_reporters", schema=None) as batch_op:
        batch_op.drop_column("rows_token")
