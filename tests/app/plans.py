"""What a statement's plan reads, run: for tests that a read does not depend on the
tables' statistics (PostgreSQL only)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.factories import create_group, create_namespace, create_tenant


def groups_of_a_namespace(client: TestClient, groups: int) -> None:
    """Groups ``g<j>`` (1,000 msgs/s), each of namespace ``t/n<j>``, for ``j < groups``."""
    create_tenant(client, "t")
    for group in range(groups):
        create_group(client, f"g{group}", publishRateInMsgs=1000)
        create_namespace(client, f"t/n{group}", group=f"g{group}")


def rows_read(session: Session, statement: Any, parameters: dict[str, Any] | None = None) -> int:
    """The rows the statement's plan scans (those its filters drop included), run."""
    return _scanned(_plan(session, statement, parameters))


def rows_passed(session: Session, statement: Any, parameters: dict[str, Any] | None = None) -> int:
    """The rows that every node of the statement's plan gives the next, or drops, run: a
    node run again for each row of another (a nested loop's inner side) counts each time."""
    return _passed(_plan(session, statement, parameters))


def _plan(session: Session, statement: Any, parameters: dict[str, Any] | None) -> Any:
    compiled = statement.compile(
        dialect=session.get_bind().dialect, compile_kwargs={"render_postcompile": True}
    )
    sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + str(compiled)
    given = {**compiled.params, **(parameters or {})}
    (plan,) = session.connection().exec_driver_sql(sql, given).one()
    return plan[0]["Plan"]


def _scanned(node: dict[str, Any]) -> int:
    rows = 0
    # A bitmap index scan's rows are its heap scan's: counted there.
    if "Scan" in node["Node Type"] and node["Node Type"] != "Bitmap Index Scan":
        kept = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        rows += kept * node["Actual Loops"]
    return rows + sum(_scanned(child) for child in node.get("Plans", ()))


def _passed(node: dict[str, Any]) -> int:
    dropped = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Join Filter", 0)
    rows = (node["Actual Rows"] + dropped) * node["Actual Loops"]
    return rows + sum(_passed(child) for child in node.get("Plans", ()))
