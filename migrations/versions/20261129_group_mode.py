"""group mode

Revision ID: 0013_group_mode
Revises: 0012
Create Date: 2026-11-29 06:00:00.000000

A group's mode: ``enforce`` (its workers hold rows back to their allocations) or ``observe``
(they are planned alike but only record what holding back would have done). Added in place,
with its check inline: SQLite's ``ADD COLUMN`` takes both, where a batch rebuild of the
table would drop the triggers that count admin writes (`0007`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_group_mode"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    column = sa.Column(
        "mode",
        sa.String(length=16),
        # Named by the metadata's convention: ck_resource_groups_mode_known.
        sa.CheckConstraint("mode IN ('enforce', 'observe')", name="mode_known"),
        server_default="enforce",
        nullable=False,
    )
    op.add_column("resource_groups", column)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # In place too: SQLite drops a column whose only check is its own, and the table
        # keeps its triggers, which a batch rebuild would not.
        op.execute("ALTER TABLE resource_groups DROP COLUMN mode")
        return
    op.drop_column("resource_groups", "mode")
