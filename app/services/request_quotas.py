"""Request-rate quotas per role, in the store."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.models import RequestQuota
from app.services._sql import insert, rowcount

DEFAULT = ""  # the role key of the default quota


def load(session: Session) -> tuple[int | None, dict[str, int]]:
    """(the default quota, the quotas per role)."""
    query = select(RequestQuota.role, RequestQuota.requests_per_second)
    rows = {role: rate for role, rate in session.execute(query)}
    default = rows.pop(DEFAULT, None)
    return default, rows


def put(session: Session, role: str, requests_per_second: int) -> None:
    statement = insert(session, RequestQuota).values(
        role=role, requests_per_second=requests_per_second
    )
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["role"],
            set_={"requests_per_second": statement.excluded.requests_per_second},
        )
    )


def remove(session: Session, role: str) -> None:
    if rowcount(session, delete(RequestQuota).where(RequestQuota.role == role)) == 0:
        raise NotFound(
            "No request quota is set" if role == DEFAULT else "Role has no request quota"
        )
