"""group levels and allocations in force

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 04:30:00.000000

A grant read every reporter of its group, so a report of a big group cost O(n), and a
settling group O(n²) per interval. Each group's row now holds what every grant needs of all
its reporters: a summary of their demands (its water levels, refreshed at most every quarter
interval) and, per dimension, the sum of the allocations in force, kept by every grant and
counted again, from the rows counted in the group, with each summary.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIMENSIONS = ("publish_msgs", "publish_bytes", "dispatch_msgs", "dispatch_bytes")


def upgrade() -> None:
    with op.batch_alter_table("quota_groups") as batch:
        batch.add_column(sa.Column("levels", sa.Text(), nullable=True))
        for dimension in DIMENSIONS:
            batch.add_column(
                sa.Column(f"{dimension}_in_force", sa.Double(), server_default="0", nullable=False)
            )
    op.create_index(
        op.f("ix_quota_usage_resource_group"), "quota_usage", ["resource_group"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_quota_usage_resource_group"), table_name="quota_usage")
    with op.batch_alter_table("quota_groups") as batch:
        for dimension in reversed(DIMENSIONS):
            batch.drop_column(f"{dimension}_in_force")
        batch.drop_column("levels")
