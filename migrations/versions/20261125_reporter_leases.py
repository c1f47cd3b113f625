"""reporter leases and group wakes

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 16:20:00.000000

A steady reporter holds its answer for a lease longer than the report interval, so a
reporter is gone when its lease (plus two intervals' grace) has run out, no longer three
intervals after it was last seen: `quota_reporters.lease_until` replaces `last_seen_at`.
A group's `wake` moves when its fair shares moved enough that reporters holding a lease
must learn theirs at once; workers watch it.

Reporters are soft state: the ones stored when this runs keep the time they were last seen
as the end of their lease, so those that still report are alive again at their next report
and the others expire as silent ones always did.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("quota_reporters") as batch:
        batch.add_column(sa.Column("lease_until", sa.TIMESTAMP(timezone=True), nullable=True))
    op.execute("UPDATE quota_reporters SET lease_until = last_seen_at")
    with op.batch_alter_table("quota_reporters") as batch:
        batch.alter_column("lease_until", existing_type=sa.TIMESTAMP(timezone=True), nullable=False)
        batch.drop_index(batch.f("ix_quota_reporters_last_seen_at"))
        batch.drop_column("last_seen_at")
        batch.create_index(batch.f("ix_quota_reporters_lease_until"), ["lease_until"], unique=False)
    with op.batch_alter_table("quota_groups") as batch:
        batch.add_column(sa.Column("wake", sa.BigInteger(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("quota_groups") as batch:
        batch.drop_column("wake")
    with op.batch_alter_table("quota_reporters") as batch:
        batch.add_column(sa.Column("last_seen_at", sa.TIMESTAMP(timezone=True), nullable=True))
    op.execute("UPDATE quota_reporters SET last_seen_at = lease_until")
    with op.batch_alter_table("quota_reporters") as batch:
        batch.alter_column(
            "last_seen_at", existing_type=sa.TIMESTAMP(timezone=True), nullable=False
        )
        batch.drop_index(batch.f("ix_quota_reporters_lease_until"))
        batch.drop_column("lease_until")
        batch.create_index(
            batch.f("ix_quota_reporters_last_seen_at"), ["last_seen_at"], unique=False
        )
