"""default resource group

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 09:00:00.000000

The default group (Kafka's default quota entity): at most one row naming the group of every
namespace with none of its own or its tenant's. It decides namespaces' effective groups, so
writes to it change the admin generation by the same triggers as groups, tenants and
namespaces (0004); without them, server processes would keep answering with the old group.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "default_resource_group"
EVENTS = ("INSERT", "UPDATE", "DELETE")
# As in 0004: a new random token; the row comes back if something deleted it.
_SQLITE_BUMP = "INSERT OR REPLACE INTO admin_generation (id, token) VALUES (1, random());"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("resource_group", sa.String(length=255), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_default_resource_group_single_row")),
        sa.ForeignKeyConstraint(
            ["resource_group"],
            ["resource_groups.name"],
            name=op.f("fk_default_resource_group_resource_group_resource_groups"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_default_resource_group")),
    )
    if op.get_bind().dialect.name == "postgresql":
        # bump_admin_generation() is 0004's.
        op.execute(
            f"CREATE TRIGGER {TABLE}_admin_generation "
            f"AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {TABLE} "
            "FOR EACH STATEMENT EXECUTE FUNCTION bump_admin_generation()"
        )
    else:
        for event in EVENTS:
            op.execute(
                f"CREATE TRIGGER {TABLE}_{event.lower()}_admin_generation "
                f"AFTER {event} ON {TABLE} BEGIN {_SQLITE_BUMP} END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {TABLE}_admin_generation ON {TABLE}")
    else:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER {TABLE}_{event.lower()}_admin_generation")
    op.drop_table(TABLE)
