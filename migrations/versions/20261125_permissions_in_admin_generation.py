"""namespace permissions move the admin generation

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 17:00:00.000000

Who may report for a namespace (its `namespace_permissions`) is checked on every usage
report; a server process remembers the answer under the admin generation, so a grant or a
revocation must move the generation as every other admin write does. Nothing a group's
reading depends on changes with a permission, so SQLite's log of changed groups gets no
entry.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "namespace_permissions"
EVENTS = ("INSERT", "UPDATE", "DELETE")
# As 0007's, the sum of admin_changes rises with every commit; but with no conflict clause
# of its own, which a grant's upsert (the outer statement) would override.
_SQLITE_BUMP = (
    "UPDATE admin_changes SET changes = changes + 1 + abs(random() % 4294967296) "
    "WHERE writer = 0; "
    "INSERT INTO admin_changes (writer, changes) SELECT 0, 1 + abs(random() % 4294967296) "
    "WHERE NOT EXISTS (SELECT 1 FROM admin_changes WHERE writer = 0);"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # bump_admin_generation() is 0004's, as 0007 redefined it.
        op.execute(
            f"CREATE TRIGGER {TABLE}_admin_generation "
            f"AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {TABLE} "
            "FOR EACH STATEMENT EXECUTE FUNCTION bump_admin_generation()"
        )
    else:
        for event in EVENTS:
            op.execute(
                f"CREATE TRIGGER {TABLE}_{event.lower()}_admin_changes "
                f"AFTER {event} ON {TABLE} BEGIN {_SQLITE_BUMP} END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {TABLE}_admin_generation ON {TABLE}")
    else:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER {TABLE}_{event.lower()}_admin_changes")
