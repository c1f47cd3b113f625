"""usage history

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 15:20:00.000000

Each group's figures, sampled at the moments they change (`usage_samples`) and kept for a
bounded time, so that every server process serves the same history; and when they were
last sampled (`usage_sampling`, one row), which the process that takes a sample moves first.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIMENSIONS = ("publish_msgs", "publish_bytes", "dispatch_msgs", "dispatch_bytes")


def _figures(dimension: str) -> list[sa.Column[object]]:
    return [
        sa.Column(f"{dimension}_limit", sa.BigInteger(), nullable=False),
        sa.Column(f"{dimension}_usage", sa.Double(), nullable=False),
        sa.Column(f"{dimension}_demand", sa.Double(), nullable=True),
        sa.Column(f"{dimension}_allocation", sa.Double(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "usage_samples",
        sa.Column("resource_group", sa.String(length=255), nullable=False),
        sa.Column("sampled_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("reporters", sa.Integer(), nullable=False),
        *[column for dimension in DIMENSIONS for column in _figures(dimension)],
        sa.PrimaryKeyConstraint("resource_group", "sampled_at", name=op.f("pk_usage_samples")),
    )
    op.create_index(op.f("ix_usage_samples_sampled_at"), "usage_samples", ["sampled_at"])
    op.create_table(
        "usage_sampling",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("sampled_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("admin_generation", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_usage_sampling_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_sampling")),
    )


def downgrade() -> None:
    op.drop_table("usage_sampling")
    op.drop_index(op.f("ix_usage_samples_sampled_at"), table_name="usage_samples")
    op.drop_table("usage_samples")
