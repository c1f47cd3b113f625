"""usage counted in units

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 12:30:00.000000

A group's usage in its history is the units its reporters said they used, counted per
bucket of the history's resolution by each server process (`usage_counts`), no longer the
sum of the rates of its reporters' last reports: the samples' usage columns go. The samples
stored before keep their other figures; their moments show no usage.

Groups' summaries stored in the objects form of their first format are dropped (soft state:
a group without one is summarized anew from its rows at its next plan), so that only the
current form is read.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIMENSIONS = ("publish_msgs", "publish_bytes", "dispatch_msgs", "dispatch_bytes")


def upgrade() -> None:
    op.create_table(
        "usage_counts",
        sa.Column("resource_group", sa.String(length=255), nullable=False),
        sa.Column("moment", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("writer", sa.BigInteger(), autoincrement=False, nullable=False),
        *[sa.Column(f"{dimension}_used", sa.Double(), nullable=False) for dimension in DIMENSIONS],
        sa.PrimaryKeyConstraint("resource_group", "moment", "writer", name=op.f("pk_usage_counts")),
    )
    op.create_index("ix_usage_counts_moment", "usage_counts", ["moment"])
    with op.batch_alter_table("usage_samples") as batch:
        for dimension in DIMENSIONS:
            batch.drop_column(f"{dimension}_usage")
    op.execute("UPDATE quota_groups SET levels = NULL WHERE levels LIKE '{%'")


def downgrade() -> None:
    with op.batch_alter_table("usage_samples") as batch:
        for dimension in DIMENSIONS:
            batch.add_column(
                sa.Column(f"{dimension}_usage", sa.Double(), server_default="0", nullable=False)
            )
    op.drop_index("ix_usage_counts_moment", table_name="usage_counts")
    op.drop_table("usage_counts")
