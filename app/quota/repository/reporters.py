"""Reporters: their claims and leases, their owners, and forgetting the silent ones."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    Delete,
    Select,
    TextClause,
    Update,
    bindparam,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql as pg

from app.models import (
    DIMENSION_COLUMNS,
    QuotaGroup,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    admin_generation,
)
from app.quota.planner import count
from app.quota.repository.groups import GroupQueries
from app.quota.repository.sql import _Array, among, insert, key_parameters, keys_in
from app.quota.tokens import new_token, new_tokens
from app.quota.types import NamespaceKey
from rgspark.wire import job_range

_ALLOCATIONS = [getattr(QuotaUsage, f"{dim}_allocation") for dim in DIMENSION_COLUMNS]

Claimed = tuple[str, int, int]
"""(owner role, rows token, admin generation) of a reporter claimed (`UsageRepository.claim`)."""


class Claim(NamedTuple):
    """A report's claim of its reporter: alive until ``until``, made for ``role`` if new."""

    reporter_id: str
    role: str
    until: datetime


class ReporterQueries(GroupQueries):
    """Reporters: their claims, leases and owners, and forgetting them."""

    __slots__ = ()

    @staticmethod
    @functools.cache
    def _claim_sql(postgresql: bool) -> Any:
        """The reporter marked alive until ``until``, made if new."""
        reporters = insert(postgresql, QuotaReporter.__table__)
        # The owner comes back (the role that first used the id, or this one if it is new),
        # the token of the reporter's rows, and the admin generation; on PostgreSQL, the
        # transaction's commit stops waiting for the disk (`UsageRepository.claim`).
        claimed = [
            QuotaReporter.role,
            QuotaReporter.rows_token,
            admin_generation().scalar_subquery(),
        ]
        if postgresql:
            claimed.append(func.set_config("synchronous_commit", "off", True))
        return (
            reporters.values(
                reporter_id=bindparam("reporter_id"),
                role=bindparam("role"),
                lease_until=bindparam("until"),
                rows_token=bindparam("token"),
            )
            .on_conflict_do_update(
                index_elements=["reporter_id"],
                set_={"lease_until": reporters.excluded.lease_until},
            )
            .returning(*claimed)
        )

    def claim(self, reporter_id: str, role: str, until: datetime) -> Claimed:
        """Mark the reporter alive until ``until`` (made if new): its owner role, its rows
        token, and the admin generation, in one statement.

        On PostgreSQL the same statement has this transaction's commit not wait for the
        disk: usage rows are soft state, rewritten every few intervals, and a crash may lose
        their last moments; waiting cost a Spark worker's report more than its work.
        """
        owner, token, generation = self._run(
            self._claim_sql(self.postgresql),
            {"reporter_id": reporter_id, "role": role, "until": until, "token": new_token()},
        ).one()[:3]
        return owner, token, generation

    @staticmethod
    @functools.cache
    def _claim_arrays_sql() -> TextClause:
        """PostgreSQL's: (reporter, owner, rows token, admin generation) of several claims at
        once, in the reporters' order."""
        dialect = pg.dialect()  # type: ignore[no-untyped-call]
        generation = admin_generation().compile(
            dialect=dialect, compile_kwargs={"literal_binds": True}
        )
        return text(
            "INSERT INTO quota_reporters (reporter_id, role, lease_until, rows_token) "
            "SELECT * FROM unnest(CAST(:reporters AS VARCHAR[]), CAST(:roles AS VARCHAR[]), "
            "CAST(:untils AS TIMESTAMPTZ[]), CAST(:tokens AS BIGINT[])) AS v ORDER BY 1 "
            "ON CONFLICT (reporter_id) DO UPDATE SET lease_until = excluded.lease_until "
            f"RETURNING reporter_id, role, rows_token, ({generation}), "
            "set_config('synchronous_commit', 'off', true)"
        )

    def claim_all(self, claims: Sequence[Claim]) -> dict[str, Claimed]:
        """Claim the reporters of several reports at once, as their own `claim`s would,
        and return what each was claimed as: on PostgreSQL, in one statement, which locks
        their rows in one order (reporters before groups, as every report and release
        locks them). A reporter with two reports among them is claimed for its first; its
        second claims its own. SQLite holds the database's write lock already: there, each
        report claims its own (nothing is returned)."""
        if not claims or not self.postgresql:
            return {}
        first: dict[str, Claim] = {}
        for claim in claims:
            first.setdefault(claim.reporter_id, claim)
        ordered = [first[reporter] for reporter in sorted(first)]
        rows = self._run(
            self._claim_arrays_sql(),
            {
                "reporters": _Array([claim.reporter_id for claim in ordered]),
                "roles": _Array([claim.role for claim in ordered]),
                "untils": _Array([claim.until for claim in ordered]),
                "tokens": _Array(new_tokens(len(ordered))),
            },
        ).all()
        # Each row ends with synchronous_commit's setting.
        return {
            reporter: (owner, token, generation) for reporter, owner, token, generation, _ in rows
        }

    @staticmethod
    @functools.cache
    def _extend_sql() -> Update:
        return (
            update(QuotaReporter)
            .where(QuotaReporter.reporter_id == bindparam("reporter"))
            .values(lease_until=bindparam("until"))
        )

    def extend(self, reporter_id: str, until: datetime) -> None:
        """Move the end of the reporter's lease (its answer's lease was not the one guessed)."""
        self._run(self._extend_sql(), {"reporter": reporter_id, "until": until})

    @staticmethod
    @functools.cache
    def _owner_sql() -> Select[str, int]:
        return select(QuotaReporter.role, QuotaReporter.rows_token).where(
            QuotaReporter.reporter_id == bindparam("reporter_id")
        )

    def owner(self, reporter_id: str) -> tuple[str, int] | None:
        """The reporter's owner role and rows token, None for an unknown reporter."""
        found = self._run(self._owner_sql(), {"reporter_id": reporter_id}).one_or_none()
        return None if found is None else (found[0], found[1])

    @staticmethod
    @functools.cache
    def _retoken_sql() -> Update:
        return (
            update(QuotaReporter)
            .where(QuotaReporter.reporter_id == bindparam("reporter"))
            .values(rows_token=bindparam("token"))
        )

    def retoken(self, reporter_id: str, token: int) -> None:
        self._run(self._retoken_sql(), {"reporter": reporter_id, "token": token})

    @staticmethod
    @functools.cache
    def _live_reporters_sql(postgresql: bool) -> Select[str, str, int]:
        """(tenant, namespace, count) of a role's other live reporters in the given
        namespaces."""
        return (
            select(QuotaUsage.tenant, QuotaUsage.namespace, func.count())
            .join(QuotaReporter, QuotaReporter.reporter_id == QuotaUsage.reporter_id)
            .where(QuotaReporter.role == bindparam("role"))
            .where(QuotaReporter.lease_until > bindparam("now"))
            .where(QuotaUsage.reporter_id != bindparam("reporter_id"))
            .where(keys_in(postgresql, QuotaUsage.tenant, QuotaUsage.namespace))
            .group_by(QuotaUsage.tenant, QuotaUsage.namespace)
        )

    def live_reporters(
        self, role: str, reporter_id: str, keys: Sequence[NamespaceKey], now: datetime
    ) -> Iterable[tuple[str, str, int]]:
        """(tenant, namespace, count) of the role's other live reporters in those namespaces."""
        parameters = {
            "role": role,
            "reporter_id": reporter_id,
            "now": now,
            **key_parameters(self.postgresql, keys),
        }
        return self._run(self._live_reporters_sql(self.postgresql), parameters)  # type: ignore[no-any-return]

    @staticmethod
    @functools.cache
    def _lock_reporters_sql(postgresql: bool) -> Select[str]:
        """Reporters of reports waiting in line, locked in name order (the order a batch's
        claim locks them in)."""
        statement = (
            select(QuotaReporter.reporter_id)
            .where(among(postgresql, QuotaReporter.reporter_id, "reporters"))
            .order_by(QuotaReporter.reporter_id)
        )
        return statement.with_for_update() if postgresql else statement

    @staticmethod
    @functools.cache
    def _keep_sql(postgresql: bool) -> Update:
        """The reporters' leases moved to at least ``until``."""
        return (
            update(QuotaReporter)
            .where(among(postgresql, QuotaReporter.reporter_id, "reporters"))
            .where(QuotaReporter.lease_until < bindparam("until"))
            .values(lease_until=bindparam("until"))
        )

    def keep(self, reporter_ids: Sequence[str], until: datetime) -> set[str]:
        """Keep those of the reporters still counted alive until ``until`` at least;
        returns them (the others are gone, or never reported)."""
        locking = self._lock_reporters_sql(self.postgresql)
        kept = set(self._run(locking, {"reporters": reporter_ids}).scalars())
        if kept:
            self._run(self._keep_sql(self.postgresql), {"reporters": sorted(kept), "until": until})
        return kept

    @staticmethod
    @functools.cache
    def _job_reporters_sql(postgresql: bool, *, of_role: bool) -> Select[str]:
        """A range on the primary key rather than LIKE, in which the ``_`` that job ids may
        hold matches any character (``ab_c-%`` would match ``abXc-...``, another job's). The
        range holds in byte order only: PostgreSQL compares in the column's collation, and a
        language's may weigh punctuation apart or ignore case (ICU's ``en`` puts ``AB-x``
        between ``ab-`` and ``ab.``), so there the comparison is made in ``C``. Its index
        then serves only a database whose collation is ``C``; elsewhere this reads the whole
        table, one row per live worker, once when a job ends."""
        reporter_id = QuotaReporter.reporter_id
        key = reporter_id.collate("C") if postgresql else reporter_id
        statement = select(reporter_id).where(key >= bindparam("low"), key < bindparam("high"))
        if of_role:
            statement = statement.where(QuotaReporter.role == bindparam("role"))
        statement = statement.order_by(reporter_id)
        return statement.with_for_update() if postgresql else statement

    def job_reporters(self, job: str, role: str | None) -> list[str]:
        """The reporters of the job (`rgspark.wire.job_of`), of ``role`` only unless None; on
        PostgreSQL locked, in name order (the order a batch of reports locks them in)."""
        low, high = job_range(job)
        statement = self._job_reporters_sql(self.postgresql, of_role=role is not None)
        return list(self._run(statement, {"low": low, "high": high, "role": role}).scalars())

    @staticmethod
    def _lease_ran_out() -> Select[str]:
        """Reporters whose lease ran out before ``now``."""
        return select(QuotaReporter.reporter_id).where(QuotaReporter.lease_until < bindparam("now"))

    @staticmethod
    @functools.cache
    def _silent_sql(postgresql: bool) -> Select[str]:
        """On PostgreSQL, not one that a report is claiming right now (it is back, and
        waiting on it could deadlock)."""
        silent = ReporterQueries._lease_ran_out()
        return silent.with_for_update(skip_locked=True) if postgresql else silent

    def silent(self, now: datetime) -> list[str]:
        """Reporters whose lease ran out before ``now`` (none that a report is claiming)."""
        return list(self._run(self._silent_sql(self.postgresql), {"now": now}).scalars())

    @staticmethod
    @functools.cache
    def _any_silent_sql() -> Select[str]:
        return ReporterQueries._lease_ran_out().limit(1)

    def any_silent(self, now: datetime) -> bool:
        """Whether some reporter's lease ran out before ``now``, without locking any."""
        return self._run(self._any_silent_sql(), {"now": now}).first() is not None

    @staticmethod
    @functools.cache
    def _allocations_of_reporters_sql(postgresql: bool) -> Select[Any]:
        """(group, *allocations per dimension) of each of the given reporters' rows in a
        group."""
        return select(QuotaUsage.resource_group, *_ALLOCATIONS).where(
            QuotaUsage.resource_group.is_not(None),
            among(postgresql, QuotaUsage.reporter_id, "reporters"),
        )

    @staticmethod
    @functools.cache
    def _forget_reporters_sql(postgresql: bool) -> Delete:
        reporters = among(postgresql, QuotaReporter.reporter_id, "reporters")
        return delete(QuotaReporter).where(reporters)

    def forget(self, reporter_ids: list[str], now: datetime) -> None:
        """Drop the reporters with their rows, and re-mark the groups they counted in."""
        self._markers_move()
        self._forget_groups(None)
        parameters = {"reporters": reporter_ids}
        allocations = self._allocations_of_reporters_sql(self.postgresql)
        leaving = count((row[0], row[1:]) for row in self._run(allocations, parameters))
        # Reporters before groups (in name order, by their new markers), the order a report
        # locks them in.
        forgetting = self._forget_reporters_sql(self.postgresql)
        self._run(forgetting, parameters)  # their rows go by cascade
        self.move_markers(leaving, now)
        self.take_in_force(leaving)

    @staticmethod
    @functools.cache
    def _forget_markers_sql() -> Delete:
        # NOT EXISTS, not NOT IN: PostgreSQL then looks each marker's group up by its key,
        # where NOT IN hashed every group's name (tens of ms with 100,000 groups, once an
        # interval in every process).
        return delete(QuotaGroup).where(
            ~select(ResourceGroup.name).where(ResourceGroup.name == QuotaGroup.name).exists()
        )

    def forget_deleted_groups(self) -> None:
        self._markers_move()
        self._forget_groups(None)
        self._run(self._forget_markers_sql())
