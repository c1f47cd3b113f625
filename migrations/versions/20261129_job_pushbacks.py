"""job pushbacks

Revision ID: 0014_job_pushbacks
Revises: 0013_group_mode
Create Date: 2026-11-29 06:30:00.000000

A job's pushback figures, in its totals (`job_figures`) and per action (`job_actions`): the
times the destination pushed back on its tasks (`pushbacks`) and the seconds that cost
(`pushback_s`). Added in place with a default of 0, which the figures posted before read
as: their workers did not count pushbacks.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_job_pushbacks"
down_revision: str | None = "0013_group_mode"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("job_figures", "job_actions")


def _columns() -> list[sa.Column[object]]:
    return [
        sa.Column("pushbacks", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("pushback_s", sa.Double(), server_default="0", nullable=False),
    ]


def upgrade() -> None:
    # In place, not by a batch rebuild: SQLite's ADD COLUMN takes a NOT NULL column with a
    # default, and the tables keep their keys as they are.
    for table in TABLES:
        for column in _columns():
            op.add_column(table, column)


def downgrade() -> None:
    for table in TABLES:
        for column in ("pushback_s", "pushbacks"):
            op.drop_column(table, column)
