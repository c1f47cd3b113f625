"""A job's figures: what its workers moved through the throttle, posted by rgspark
(``POST /quota/v1/jobs/{jobId}/figures``), summed per (job, role, kind) and read back by the
driver on Spark Connect (``GET``). A post adds itself to the totals (`JobFigure`) and
to its action (`JobAction`) in upserts, never reading first; the `KEPT_ACTIONS` latest actions
stay. Why: docs/design.md ("The protocol").
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    bindparam,
    case,
    delete,
    func,
    literal,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.access import Principal
from app.models import JobAction, JobFigure
from app.quota.effective import parse_namespace
from app.quota.reporters import authorize_reporting
from app.quota.schemas import (
    ActionFiguresRead,
    FigureKind,
    JobFiguresRead,
    JobFiguresReport,
)
from app.schemas import INT64_MAX
from rgspark.wire import KEPT_ACTIONS

__all__ = ["add", "forget_before", "read"]


def add(
    session: Session, principal: Principal, job: str, report: JobFiguresReport, now: datetime
) -> None:
    """Add a post's figures to what the job holds under the caller's role, as updated at
    ``now``; only a role that may report for the post's namespace may."""
    authorize_reporting(session, principal, [parse_namespace(report.namespace)])
    connection = session.connection()
    sql = _statements(connection.dialect.name)
    key = {"job_id": job, "role": principal.role, "kind": report.kind}
    actions = report.actions.values()
    connection.execute(
        sql.add_totals,
        {
            **key,
            "rows": sum(action.rows for action in actions),
            "bytes": sum(action.bytes for action in actions),
            "held_s": sum(action.heldS for action in actions),
            "pushbacks": sum(action.pushbacks for action in actions),
            "pushback_s": sum(action.pushbackS for action in actions),
            "updated_at": now,
        },
    )
    connection.execute(
        sql.add_actions,
        [
            {
                **key,
                "action": action,
                "rows": figures.rows,
                "bytes": figures.bytes,
                "held_s": figures.heldS,
                "pushbacks": figures.pushbacks,
                "pushback_s": figures.pushbackS,
                "started_ms": figures.startMs,
                "ended_ms": figures.endMs,
            }
            for action, figures in report.actions.items()
        ],
    )
    connection.execute(sql.trim, {**key, "kept": KEPT_ACTIONS})


def read(session: Session, principal: Principal, job: str, kind: FigureKind) -> JobFiguresRead:
    """The job's figures of ``kind`` under the caller's role (a superuser's: summed over
    every role, an action's merged as posts are); zeros for a job with none."""
    connection = session.connection()
    sql = _statements(connection.dialect.name)
    own = not principal.is_superuser
    parameters = {"job_id": job, "kind": kind, "role": principal.role}
    totals = connection.execute(sql.totals[own], parameters).all()
    actions: dict[str, ActionFiguresRead] = {}
    for row in connection.execute(sql.actions[own], parameters):
        actions[row.action] = _merged(actions.get(row.action), _action_read(row))
    return JobFiguresRead(
        kind=kind,
        rows=sum(row.rows for row in totals),
        bytes=sum(row.bytes for row in totals),
        heldS=sum(row.held_s for row in totals),
        pushbacks=sum(row.pushbacks for row in totals),
        pushbackS=sum(row.pushback_s for row in totals),
        actions=dict(sorted(actions.items())),
    )


def forget_before(session: Session, before: datetime) -> None:
    """Delete the figures of every (job, role, kind) last updated before ``before``, their
    actions with them."""
    session.connection().execute(delete(JobFigure).where(JobFigure.updated_at < before))


def _action_read(row: Any) -> ActionFiguresRead:
    """An action's figures as one role's row of them holds them."""
    return ActionFiguresRead(
        rows=row.rows,
        bytes=row.bytes,
        heldS=row.held_s,
        pushbacks=row.pushbacks,
        pushbackS=row.pushback_s,
        startMs=row.started_ms,
        endMs=row.ended_ms,
    )


def _merged(known: ActionFiguresRead | None, added: ActionFiguresRead) -> ActionFiguresRead:
    """An action's figures under one more role, merged as posts merge them: sums, the
    earliest start, the latest end."""
    if known is None:
        return added
    return ActionFiguresRead(
        rows=known.rows + added.rows,
        bytes=known.bytes + added.bytes,
        heldS=known.heldS + added.heldS,
        pushbacks=known.pushbacks + added.pushbacks,
        pushbackS=known.pushbackS + added.pushbackS,
        startMs=min(known.startMs, added.startMs),
        endMs=max(known.endMs, added.endMs),
    )


class _Statements:
    """The statements of job figures for one dialect, built (and compiled) once."""

    def __init__(self, dialect: str) -> None:
        pg = dialect == "postgresql"
        insert = postgresql.insert if pg else sqlite.insert
        # Of two values: PostgreSQL's LEAST and GREATEST, SQLite's two-argument min and max.
        least, greatest = (func.least, func.greatest) if pg else (func.min, func.max)

        totals = insert(JobFigure)
        self.add_totals = totals.on_conflict_do_update(
            index_elements=["job_id", "role", "kind"],
            set_={
                **_sums_added(JobFigure, totals.excluded),
                "updated_at": totals.excluded.updated_at,
            },
        )
        actions = insert(JobAction)
        self.add_actions = actions.on_conflict_do_update(
            index_elements=["job_id", "role", "kind", "action"],
            set_={
                **_sums_added(JobAction, actions.excluded),
                "started_ms": least(JobAction.started_ms, actions.excluded.started_ms),
                "ended_ms": greatest(JobAction.ended_ms, actions.excluded.ended_ms),
            },
        )
        kept = (
            select(JobAction.action)
            .where(*_of_key(JobAction))
            .order_by(JobAction.started_ms.desc(), JobAction.action.desc())
            .limit(bindparam("kept"))
        )
        #: Every action of the (job, role, kind) but the latest by start.
        self.trim = delete(JobAction).where(*_of_key(JobAction), JobAction.action.not_in(kept))
        #: By whether of ``:role`` only (else of every role): the sums of the job's kind, and
        #: its actions' (the action, its sums, started_ms, ended_ms).
        self.totals = {
            of_role: select(
                JobFigure.rows,
                JobFigure.bytes,
                JobFigure.held_s,
                JobFigure.pushbacks,
                JobFigure.pushback_s,
            ).where(*_of_key(JobFigure, of_role=of_role))
            for of_role in (True, False)
        }
        self.actions = {
            of_role: select(
                JobAction.action,
                JobAction.rows,
                JobAction.bytes,
                JobAction.held_s,
                JobAction.pushbacks,
                JobAction.pushback_s,
                JobAction.started_ms,
                JobAction.ended_ms,
            ).where(*_of_key(JobAction, of_role=of_role))
            for of_role in (True, False)
        }


def _of_key(model: type[JobFigure] | type[JobAction], *, of_role: bool = True) -> list[Any]:
    """Conditions on a row's (job, role, kind), from the parameters of those names."""
    conditions = [model.job_id == bindparam("job_id"), model.kind == bindparam("kind")]
    if of_role:
        conditions.append(model.role == bindparam("role"))
    return conditions


def _sums_added(model: type[JobFigure] | type[JobAction], excluded: Any) -> dict[str, Any]:
    """What an upsert sets the sums of a row of ``model`` to: what it holds plus what the
    post adds (``excluded``, the row it would have inserted)."""
    return {
        "rows": _added(model.rows, excluded.rows),
        "bytes": _added(model.bytes, excluded.bytes),
        "held_s": model.held_s + excluded.held_s,
        "pushbacks": _added(model.pushbacks, excluded.pushbacks),
        "pushback_s": model.pushback_s + excluded.pushback_s,
    }


def _added(stored: Any, added: Any) -> ColumnElement[int]:
    """``stored + added``, held at the largest BIGINT instead of overflowing (an error on
    PostgreSQL, a float on SQLite). Both are never negative."""
    bound = literal(INT64_MAX, BigInteger)
    return case((stored > bound - added, bound), else_=stored + added)


@functools.cache
def _statements(dialect: str) -> _Statements:
    return _Statements(dialect)
