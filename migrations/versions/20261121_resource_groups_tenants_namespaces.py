"""resource groups tenants namespaces

Revision ID: 0001
Revises:
Create Date: 2026-11-21 00:44:08.968195
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "resource_groups",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("publish_rate_in_msgs", sa.Integer(), nullable=False),
        sa.Column("publish_rate_in_bytes", sa.BigInteger(), nullable=False),
        sa.Column("dispatch_rate_in_msgs", sa.Integer(), nullable=False),
        sa.Column("dispatch_rate_in_bytes", sa.BigInteger(), nullable=False),
        sa.Column("replication_dispatch_rate_in_msgs", sa.Integer(), nullable=False),
        sa.Column("replication_dispatch_rate_in_bytes", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "dispatch_rate_in_bytes >= -1",
            name=op.f("ck_resource_groups_dispatch_rate_in_bytes_not_below_minus_one"),
        ),
        sa.CheckConstraint(
            "dispatch_rate_in_msgs >= -1",
            name=op.f("ck_resource_groups_dispatch_rate_in_msgs_not_below_minus_one"),
        ),
        sa.CheckConstraint(
            "publish_rate_in_bytes >= -1",
            name=op.f("ck_resource_groups_publish_rate_in_bytes_not_below_minus_one"),
        ),
        sa.CheckConstraint(
            "publish_rate_in_msgs >= -1",
            name=op.f("ck_resource_groups_publish_rate_in_msgs_not_below_minus_one"),
        ),
        sa.CheckConstraint(
            "replication_dispatch_rate_in_bytes >= -1",
            name=op.f("ck_resource_groups_replication_dispatch_rate_in_bytes_not_below_minus_one"),
        ),
        sa.CheckConstraint(
            "replication_dispatch_rate_in_msgs >= -1",
            name=op.f("ck_resource_groups_replication_dispatch_rate_in_msgs_not_below_minus_one"),
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_resource_groups")),
    )
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("admin_roles", sa.JSON(), nullable=False),
        sa.Column("allowed_clusters", sa.JSON(), nullable=False),
        sa.Column("resource_group", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["resource_group"],
            ["resource_groups.name"],
            name=op.f("fk_tenants_resource_group_resource_groups"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tenants")),
    )
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tenants_resource_group"), ["resource_group"], unique=False
        )

    op.create_table(
        "namespaces",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("resource_group", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["resource_group"],
            ["resource_groups.name"],
            name=op.f("fk_namespaces_resource_group_resource_groups"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant"],
            ["tenants.name"],
            name=op.f("fk_namespaces_tenant_tenants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("tenant", "name", name=op.f("pk_namespaces")),
    )
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_namespaces_resource_group"), ["resource_group"], unique=False
        )

    op.create_table(
        "namespace_permissions",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=255), nullable=False),
        sa.Column("actions", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant", "namespace"],
            ["namespaces.tenant", "namespaces.name"],
            name="fk_namespace_permissions_namespace_namespaces",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant", "namespace", "role", name=op.f("pk_namespace_permissions")
        ),
    )


def downgrade() -> None:
    op.drop_table("namespace_permissions")
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_namespaces_resource_group"))

    op.drop_table("namespaces")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tenants_resource_group"))

    op.drop_table("tenants")
    op.drop_table("resource_groups")
