"""job figures

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 10:00:00.000000

What a job's tasks moved through the throttle, per role and kind, as its workers post it
(`job_figures`), with the latest actions' shares (`job_actions`, deleted with their totals):
the figures a Spark Connect session reads back on its driver.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ("job_id", "role", "kind")


def _key() -> list[sa.Column[object]]:
    return [
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("role", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
    ]


def _sums() -> list[sa.Column[object]]:
    return [
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("held_s", sa.Double(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "job_figures",
        *_key(),
        *_sums(),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(*KEY, name=op.f("pk_job_figures")),
    )
    op.create_index(op.f("ix_job_figures_updated_at"), "job_figures", ["updated_at"])
    op.create_table(
        "job_actions",
        *_key(),
        sa.Column("action", sa.String(length=128), nullable=False),
        *_sums(),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("ended_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            list(KEY),
            [f"job_figures.{column}" for column in KEY],
            name="fk_job_actions_job_figures",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(*KEY, "action", name=op.f("pk_job_actions")),
    )


def downgrade() -> None:
    op.drop_table("job_actions")
    op.drop_index(op.f("ix_job_figures_updated_at"), table_name="job_figures")
    op.drop_table("job_figures")
