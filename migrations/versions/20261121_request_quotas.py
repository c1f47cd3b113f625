"""request quotas

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 01:43:37.630669
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "request_quotas",
        sa.Column("role", sa.String(length=255), nullable=False),
        sa.Column("requests_per_second", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "requests_per_second > 0", name=op.f("ck_request_quotas_requests_per_second_positive")
        ),
        sa.PrimaryKeyConstraint("role", name=op.f("pk_request_quotas")),
    )


def downgrade() -> None:
    op.drop_table("request_quotas")
