"""Reporters: who may report for a namespace, which role a reporter belongs to, and when
one is gone (released at exit, with the rest of its job when the job ends, or silent too
long) and its shares return to the others."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.access import Principal
from app.errors import Forbidden, NotFound, TooManyRequests
from app.quota.cache import ReportCache
from app.quota.leases import lease_until
from app.quota.repository import Claim, Claimed, UsageRepository
from app.quota.types import NamespaceKey

__all__ = [
    "authorize_reporting",
    "claim_reporter",
    "expire",
    "limit_reporters",
    "release",
    "release_job",
]

REPORTING_ACTIONS = frozenset({"produce", "consume"})


def authorize_reporting(
    session: Session, principal: Principal, keys: Iterable[NamespaceKey]
) -> None:
    """Namespace clients report only for namespaces they may produce to or consume from."""
    if principal.is_superuser:
        return
    # By the repository's statements, which take any number of keys: a `(tenant, namespace)
    # IN (...)` of 10,000 pairs is past the depth of expression PostgreSQL parses.
    queries = UsageRepository.of(session)
    keys = set(keys)
    granted = queries.grants(principal.role, list(keys))
    allowed = {(t, ns) for t, ns, actions in granted if REPORTING_ACTIONS & set(actions)}
    tenants = {tenant for tenant, _ in keys - allowed}
    if tenants:
        admin_of = {
            name for name, roles in queries.tenant_admins(list(tenants)) if principal.role in roles
        }
        allowed |= {key for key in keys if key[0] in admin_of}
    denied = sorted(keys - allowed)
    if denied:
        tenant, namespace = denied[0]
        raise Forbidden(
            f"Role {principal.role} may not report for namespace {tenant}/{namespace}: "
            "it needs the produce or consume permission"
        )


def claim_reporter(
    session: Session, principal: Principal, reporter_id: str, claim: Claim | Claimed | None
) -> tuple[int | None, int]:
    """The reporter belongs to the role that first reported with it: mark it alive as
    ``claim`` says, unless its batch's statement marked it already and this is what that
    answered (`UsageRepository.claim_all`); None, for a report too old to be stored, marks
    nothing.

    Returns the token of its rows (None if it has none) and the admin generation, read in
    the same statement.
    """
    queries = UsageRepository.of(session)
    # Alive: one statement marks it and returns the owner. Refused, the transaction rolls
    # back, and the mark with it.
    if isinstance(claim, Claim):
        claim = queries.claim(claim.reporter_id, claim.role, claim.until)
    if claim is not None:
        owner, token, generation = claim
    else:
        generation = queries.generation()
        found = queries.owner(reporter_id)
        if found is None:
            return None, generation
        owner, token = found
    if owner != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")
    return token, generation


def limit_reporters(
    queries: UsageRepository,
    principal: Principal,
    reporter_id: str,
    keys: list[NamespaceKey],
    now: datetime,
    most: int,
) -> None:
    """Refuse a reporter new to namespaces where its role already has ``most`` live ones.

    Shares go to namespaces first, so more reporter ids win a namespace no more quota; the
    cap keeps a role from growing the server's tables and memory without bound. Superusers
    are exempt. Counted without a lock: reporters joining at the same instant may pass it
    together, which only bounds the count a little more loosely.
    """
    if principal.is_superuser:
        return
    for tenant, namespace, count in queries.live_reporters(principal.role, reporter_id, keys, now):
        if count >= most:
            raise TooManyRequests(
                f"Role {principal.role} has {count} live reporters in namespace "
                f"{tenant}/{namespace}, the most allowed (RG_MAX_REPORTERS_PER_NAMESPACE); "
                "reuse a reporter id per process, or wait for silent ones to expire"
            )


def release(
    session: Session,
    principal: Principal,
    reporter_id: str,
    now: datetime,
    cache: ReportCache | None = None,
) -> None:
    """Free a reporter's shares at once (PIP-82's "report 0"), as rgspark does at exit.

    Another role's reporter is answered as one that does not exist: the answer tells no
    one whether an id is in use."""
    queries = UsageRepository.of(session)
    found = queries.owner(reporter_id)
    if found is None or (found[0] != principal.role and not principal.is_superuser):
        raise NotFound(f"Role {principal.role} has no reporter {reporter_id}")
    _forget(queries, [reporter_id], now, cache)


def release_job(
    session: Session,
    principal: Principal,
    job: str,
    now: datetime,
    cache: ReportCache | None = None,
) -> int:
    """Free at once the shares of every reporter of the job (`rgspark.wire.job_of`) that
    the caller's role owns (a superuser's: any role's), as `release` frees one's; returns
    how many. What a Spark driver does when its application ends: Spark ends its Python
    workers with ``os._exit``, so their own release at exit never runs.

    Other roles' reporters of the same job id are left, and nothing tells of them: the
    answer is the same whether or not they exist."""
    queries = UsageRepository.of(session)
    reporter_ids = queries.job_reporters(job, None if principal.is_superuser else principal.role)
    if reporter_ids:
        _forget(queries, reporter_ids, now, cache)
    return len(reporter_ids)


def any_silent(session: Session, now: datetime) -> bool:
    """Whether some reporter's lease ran out before ``now``: a read, so that looking often
    costs no write (on SQLite, every write transaction waits for the others)."""
    return UsageRepository.of(session).any_silent(now)


def keep(
    session: Session,
    reporter_ids: list[str],
    kept_s: float,
    *,
    clock: Callable[[], float],
    interval_s: float,
) -> set[str]:
    """Keep the reporters of reports waiting in line (`app.quota.lanes`) counted alive for
    ``kept_s`` from now, then the grace, as an answer's lease would; returns those kept."""
    now = datetime.fromtimestamp(clock(), UTC)
    return UsageRepository.of(session).keep(reporter_ids, lease_until(now, kept_s, interval_s))


def expire(session: Session, now: datetime, cache: ReportCache | None = None) -> None:
    """Forget reporters whose lease ran out (`app.quota.leases`): their shares return to
    the others, and their rows go with them, so the tables do not grow without bound."""
    queries = UsageRepository.of(session)
    silent = queries.silent(now)
    if silent:
        _forget(queries, silent, now, cache)
    queries.forget_deleted_groups()


def _forget(
    queries: UsageRepository, reporter_ids: list[str], now: datetime, cache: ReportCache | None
) -> None:
    queries.forget(reporter_ids, now)
    if cache is not None:
        cache.forget(reporter_ids)
        cache.forget_markers()  # the groups they counted in have new markers
