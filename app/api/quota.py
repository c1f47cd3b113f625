"""``/quota/v1``: usage reports from enforcing processes, answered with their allocations;
and the figures of jobs, which their workers add to and their drivers read back.

Not part of Pulsar's admin API: Pulsar brokers exchange usage on a topic, while rgspark's
workers report to this server, which shares each group's quota among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints, ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.background import BackgroundTask

from app import transactions
from app.access import Principal
from app.api import deps
from app.api.deps import CurrentPrincipal, StateDep
from app.errors import (
    AppError,
    BadRequest,
    Forbidden,
    NotFound,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    responses,
)
from app.quota import history, job_figures, reporters, store
from app.quota.counts import Bucket
from app.quota.schemas import (
    MAX_CLOCK_AHEAD_S,
    REPORTER_ID_PATTERN,
    WATCHED_GROUP_PATTERN,
    AdminChanges,
    FigureKind,
    JobFiguresRead,
    JobFiguresReport,
    NamespacePolicy,
    ReportResult,
    UsageReport,
)
from app.quota.tuning import MAX_WAIT_S
from app.schemas import NamespaceName, TenantName
from app.state import AppState
from rgspark.wire import JOB_ID_PATTERN, KEPT_HEADER

router = APIRouter(prefix="/quota/v1", tags=["quota"])
logger = logging.getLogger(__name__)

MAX_WATCHED_GROUPS = 100  # groups one long poll may watch: a worker's namespaces' groups
FORGET_FIGURES_EVERY_S = 60.0  # how often each process deletes jobs' figures past retention

ReporterId = Annotated[
    str, Path(pattern=REPORTER_ID_PATTERN, description="A reporter's id: 1-64 of A-Z a-z 0-9 _ -")
]
JobId = Annotated[
    str,
    Path(
        pattern=JOB_ID_PATTERN,
        description="A job's id: 1-32 of A-Z a-z 0-9 _; its workers' reporter ids are the "
        "job's id, a - and more",
    ),
]
_ERRORS = responses(BadRequest, Unauthorized, Forbidden, NotFound)
_REPORT_ERRORS = responses(
    BadRequest, Unauthorized, Forbidden, NotFound, TooManyRequests, ServiceUnavailable
)
_REPORT_ERRORS[503]["headers"] = {
    KEPT_HEADER: {
        "description": (
            "On a report not stored because it waited too long in line: for how many "
            "milliseconds after it was sent the server still counts its reporter alive, "
            "holding its last allocations (then the grace); 0: the server no longer counts it. "
            "Absent on other 503s."
        ),
        "schema": {"type": "integer", "minimum": 0},
    }
}


# A report of thousands of namespaces is validated by pydantic straight from its bytes, in
# half the time FastAPI's json.loads and then validation take; so FastAPI does not see the
# body, and the OpenAPI document gets its schema from here.
_REPORT_SCHEMA = UsageReport.model_json_schema(ref_template="#/components/schemas/{model}")
SCHEMAS: dict[str, Any] = {
    **_REPORT_SCHEMA.pop("$defs"),
    "UsageReport": _REPORT_SCHEMA,
}
"""Schemas of the bodies this router validates itself, for the OpenAPI document."""
_REPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UsageReport"}}},
    }
}


async def _usage_report(request: Request) -> UsageReport:
    try:
        return UsageReport.model_validate_json(await request.body())
    except ValidationError as error:
        errors = [{**detail, "loc": ("body", *detail["loc"])} for detail in error.errors()]
        raise RequestValidationError(errors) from None


@router.post(
    "/reporters/{reporterId}/reports",
    response_model=ReportResult,
    responses=_REPORT_ERRORS,
    openapi_extra=_REPORT_BODY,
)
async def report_usage(
    request: Request, principal: CurrentPrincipal, state: StateDep, reporterId: ReporterId
) -> Response:
    """Report usage and demand per namespace; get back each namespace's limits and allocations."""
    body = await _usage_report(request)
    now = state.clock()
    ahead_s = body.sentAtMs / 1000 - now
    if ahead_s > MAX_CLOCK_AHEAD_S:
        raise BadRequest(
            f"sentAtMs is {ahead_s:.0f} s after the server's clock, more than "
            f"{MAX_CLOCK_AHEAD_S:g} s: set the reporter's clock right (NTP)"
        )
    expire = _expiry_due(state, now)
    serving = store.Serving(
        interval_s=state.settings.report_interval_seconds,
        max_lease_s=state.settings.report_lease_seconds,
        cache=state.report_cache,
        stats=state.metrics.groups,
        counter=state.usage_counter,
        max_reporters=state.settings.max_reporters_per_namespace,
    )
    # Already JSON (`store.submit` keeps the parts of steady answers serialized).
    answer = await state.report_lanes.report(
        serving, principal=principal, reporter_id=reporterId, report=body, now=now
    )
    # Silent reporters are looked for once the answer has gone: its worker does not wait
    # for them.
    background = BackgroundTask(_expire, state, now) if expire else None
    return Response(answer, media_type="application/json", background=background)


def _expiry_due(state: AppState, now: float) -> bool:
    """Whether this process looks for silent reporters now: once per interval, at a report
    or, when none comes, on its own (`keep_up`), so that a group whose workers all stopped
    is known idle whether or not anyone reports."""
    if now - state.last_expiry < state.settings.report_interval_seconds:
        return False
    state.last_expiry = now
    return True


async def _expire(state: AppState, now: float) -> None:
    """Forget the reporters silent at ``now``, if any: a transaction of its own, after any report's
    (whose locks are then released, so the two never wait on each other's in a cycle). Should
    it fail (the database is away), the next interval tries again."""
    silent_since = datetime.fromtimestamp(now, UTC)
    with contextlib.suppress(DBAPIError):  # if the database is away, the write says so
        # A read first: looking often costs no write (SQLite's writers take turns).
        if not await transactions.looking(state.sessions, reporters.any_silent, silent_since):
            return
    await _upkeep(
        state, "forget silent reporters", reporters.expire, silent_since, state.report_cache
    )


async def _upkeep(state: AppState, what: str, func: Any, *args: Any) -> bool:
    """Run ``func(session, *args)`` as a transaction of its own; whether it committed.
    A failure is logged and counted, never raised: its loop tries again."""
    try:
        await transactions.transaction(state.sessions, func, *args)
    except DBAPIError as error:
        state.metrics.database_errors.labels(type(error).__name__).inc()
        if transactions.is_outage(error):  # said once for the whole server, not each second
            transactions.DATABASE_OUTAGE.failed(error.orig)
        else:
            logger.warning("could not %s: %s", what, type(error).__name__)
    except AppError as error:  # collided too often with other writers
        logger.warning("could not %s: %s", what, error.reason)
    else:
        return True
    return False


async def keep_up(state: AppState) -> None:
    """Until cancelled (the app's lifespan): every `history.WRITE_EVERY_S`, write the usage
    counts that are complete (`app.quota.counts`); and four times an interval, look for
    silent reporters (a read, and a write only when some are), so that a reporter is
    forgotten, and its group woken, within a quarter of an interval of its lease's end,
    whether or not reports come; at its first turn and then every `FORGET_FIGURES_EVERY_S`,
    delete jobs' figures past their retention. On cancel, write every count held, complete
    or not: the units went through."""
    period_s = min(history.WRITE_EVERY_S, state.settings.report_interval_seconds / 4)
    written_at = state.clock()
    figures_at = written_at - FORGET_FIGURES_EVERY_S
    try:
        while True:
            await asyncio.sleep(period_s)
            now = state.clock()
            if now - written_at >= history.WRITE_EVERY_S:
                written_at = now
                await _write_counts(state, state.usage_counter.complete(now))
            if now - figures_at >= FORGET_FIGURES_EVERY_S:
                figures_at = now
                await forget_old_figures(state, now)
            await _expire(state, now)
    finally:
        await _write_counts(state, state.usage_counter.take_all())


async def _write_counts(state: AppState, buckets: list[Bucket]) -> None:
    if buckets and not await _upkeep(
        state, "write usage counts", history.write_counts, buckets, state.writer
    ):
        state.usage_counter.put_back(buckets)


async def forget_old_figures(state: AppState, now: float) -> bool:
    """Delete the figures of jobs not updated for `job_figures_retention_seconds` at
    ``now``, as a transaction of its own; whether it committed. A driver reads its job's
    figures after its session stopped, so they outlive the job's release."""
    retention_s = state.settings.job_figures_retention_seconds
    before = datetime.fromtimestamp(now - retention_s, UTC)
    return await _upkeep(state, "forget old job figures", job_figures.forget_before, before)


@router.delete(
    "/reporters/{reporterId}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, NotFound),
)
async def release_reporter(
    request: Request, principal: CurrentPrincipal, state: StateDep, reporterId: ReporterId
) -> None:
    """Release a reporter's shares at once, as a worker does when it exits."""
    now = datetime.fromtimestamp(state.clock(), UTC)
    await deps.write(request, reporters.release, principal, reporterId, now, state.report_cache)


@router.delete("/jobs/{jobId}", status_code=204, responses=responses(BadRequest, Unauthorized))
async def release_job(
    request: Request, principal: CurrentPrincipal, state: StateDep, jobId: JobId
) -> None:
    """Release at once the shares of every reporter of a job (ids `{jobId}-...`) that the
    caller's role owns (a superuser: any role's), as a Spark driver does when its application
    ends. 204 whether or not there were any: other roles' reporters are neither released nor
    told of."""
    now = datetime.fromtimestamp(state.clock(), UTC)
    await deps.write(request, reporters.release_job, principal, jobId, now, state.report_cache)


@router.post(
    "/jobs/{jobId}/figures",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden),
)
async def add_job_figures(
    request: Request,
    principal: CurrentPrincipal,
    state: StateDep,
    jobId: JobId,
    figures: JobFiguresReport,
) -> None:
    """Add what some of a job's tasks moved through the throttle, per action, to the job's
    figures under the caller's role, which must be allowed to report for the namespace: how
    rgspark counts on a Spark Connect session, which has no accumulators."""
    now = datetime.fromtimestamp(state.clock(), UTC)
    await deps.write(request, job_figures.add, principal, jobId, figures, now)


@router.get("/jobs/{jobId}/figures", responses=responses(BadRequest, Unauthorized))
async def get_job_figures(
    request: Request,
    principal: CurrentPrincipal,
    jobId: JobId,
    kind: Annotated[FigureKind, Query(description="Which figures: `publish` or `dispatch`.")],
) -> JobFiguresRead:
    """A job's figures of one kind under the caller's role (a superuser's: every role's,
    each action's merged), summed over every post, with the latest actions'. Zeros for a job
    with none, as for one whose figures are another role's: those are neither shown nor
    told of. Kept after the job is released, until not updated for the retention."""
    return await deps.read(request, job_figures.read, principal, jobId, kind)


@router.get("/namespaces/{tenant}/{namespace}/policy", responses=_ERRORS)
async def get_policy(
    request: Request,
    principal: CurrentPrincipal,
    state: StateDep,
    tenant: TenantName,
    namespace: NamespaceName,
) -> NamespacePolicy:
    """A namespace's effective group and limits, for a job checking its setup before it runs."""
    return await deps.read(request, _policy, principal, state, (tenant, namespace))


def _policy(
    session: deps.Session, principal: Principal, state: AppState, key: tuple[str, str]
) -> NamespacePolicy:
    # Rights first: a role that may not report for the namespace gets 403 whether it exists
    # or not.
    reporters.authorize_reporting(session, principal, [key])
    effective = store.effective_groups(session, [key], state.report_cache)[key]
    return NamespacePolicy(
        resourceGroup=effective.group,
        limits=effective.limits,
        reportIntervalMs=round(state.settings.report_interval_seconds * 1000),
        mode=effective.mode,
    )


@router.get(
    "/changes",
    response_model=AdminChanges,
    response_model_exclude_none=True,
    responses=responses(BadRequest, Unauthorized),
)
async def watch_changes(
    request: Request,
    # Any authenticated role: it learns only that something changed.
    _caller: CurrentPrincipal,
    state: StateDep,
    after: Annotated[
        int | None,
        Query(description="The generation last seen: the answer waits until it is above it."),
    ] = None,
    group: Annotated[
        list[Annotated[str, StringConstraints(pattern=WATCHED_GROUP_PATTERN)]] | None,
        Query(
            max_length=MAX_WATCHED_GROUPS,
            description="A group to watch, as `WAKE:NAME` with the wake last seen (`:NAME` "
            "when none was): the answer waits until the wake is another.",
        ),
    ] = None,
    waitMs: Annotated[
        int,
        Query(ge=0, le=round(MAX_WAIT_S * 1000), description="The longest to wait, in ms."),
    ] = 30_000,
) -> AdminChanges | Response:
    """The admin generation, once it is above `after`, and the watched groups' wakes, once
    one moved: a long poll that workers hold, so that a change to their limits or shares
    reaches them at once (see `app.quota.changes`)."""
    wakes = _watched(group or [])
    waiting = asyncio.ensure_future(state.changes.wait(after, wakes, waitMs / 1000))
    # A worker that closes stops waiting here too, and no longer holds up a shutdown.
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        gone.cancel()
    if waiting not in done:
        return Response(status_code=204)  # nobody is listening
    generation, found = waiting.result()
    return AdminChanges(generation=generation, groups=found if group else None)


def _watched(groups: list[str]) -> dict[str, int | None]:
    """``WAKE:NAME`` parameters (`WATCHED_GROUP_PATTERN`) as {name: wake}, None where no
    wake was given."""
    wakes: dict[str, int | None] = {}
    for watched in groups:
        wake, _, name = watched.partition(":")
        wakes[name] = int(wake) if wake else None
    return wakes


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
