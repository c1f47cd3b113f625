"""quota reporters and usage

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 00:58:26.459900
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "quota_reporters",
        sa.Column("reporter_id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=255), nullable=False),
        sa.Column("last_seen_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("reporter_id", name=op.f("pk_quota_reporters")),
    )
    with op.batch_alter_table("quota_reporters", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_quota_reporters_last_seen_at"), ["last_seen_at"], unique=False
        )

    op.create_table(
        "quota_usage",
        sa.Column("reporter_id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("written_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("publish_msgs_usage", sa.Double(), nullable=False),
        sa.Column("publish_msgs_demand", sa.Double(), nullable=False),
        sa.Column("publish_msgs_allocation", sa.Double(), nullable=True),
        sa.Column("publish_bytes_usage", sa.Double(), nullable=False),
        sa.Column("publish_bytes_demand", sa.Double(), nullable=False),
        sa.Column("publish_bytes_allocation", sa.Double(), nullable=True),
        sa.Column("dispatch_msgs_usage", sa.Double(), nullable=False),
        sa.Column("dispatch_msgs_demand", sa.Double(), nullable=False),
        sa.Column("dispatch_msgs_allocation", sa.Double(), nullable=True),
        sa.Column("dispatch_bytes_usage", sa.Double(), nullable=False),
        sa.Column("dispatch_bytes_demand", sa.Double(), nullable=False),
        sa.Column("dispatch_bytes_allocation", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["reporter_id"],
            ["quota_reporters.reporter_id"],
            name=op.f("fk_quota_usage_reporter_id_quota_reporters"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant", "namespace"],
            ["namespaces.tenant", "namespaces.name"],
            name="fk_quota_usage_namespace_namespaces",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("reporter_id", "tenant", "namespace", name=op.f("pk_quota_usage")),
    )
    with op.batch_alter_table("quota_usage", schema=None) as batch_op:
        batch_op.create_index("ix_quota_usage_namespace", ["tenant", "namespace"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("quota_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_quota_usage_namespace")

    op.drop_table("quota_usage")
    with op.batch_alter_table("quota_reporters", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_quota_reporters_last_seen_at"))

    op.drop_table("quota_reporters")
