"""Every query of usage reporting, by name: what it takes and what it gives back.

The SQL is `app.quota.statements`' (built and compiled once per dialect); here each is run
with its parameters and its rows turned into the shapes the store works with, so that the
store reads as steps (look up, plan, settle, write, answer) rather than as SQL.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from psycopg import adapters
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import Connection, Select, bindparam, select
from sqlalchemy.orm import Session, SessionTransaction

from app.models import QuotaReporter
from app.quota.cache import MarkerLook, Row
from app.quota.planner import count, take
from app.quota.statements import (
    FIGURE_COLUMNS,
    Statements,
    new_token,
    new_tokens,
    statements_for,
)
from app.quota.tuning import SHARED_LOOK_BACK, SHARED_LOOK_EXTRA
from app.quota.types import ALLOCATIONS, Figures, NamespaceKey, Rates
from rgspark.wire import job_range

__all__ = ["Claim", "Claimed", "GroupRow", "Peer", "Saved", "UsageRepository", "Written"]


class _Array(list[Any]):
    """Values the driver sends to PostgreSQL as an array in its binary form: a report's
    statements over arrays (`Statements.upsert_arrays` and the like) pass thousands of
    values each, which the text form has the driver write out (and summaries' quotes
    escape) one by one, in Python. One type per array (floats are never mixed with ints)."""


adapters.register_dumper(_Array, ListBinaryDumper)

Written = tuple[NamespaceKey, str | None, int | None, Figures]
"""(namespace, group, planned marker, figures) of a row a report writes."""
Saved = tuple[str, str | None, Sequence[float], bool]
"""(group, summary JSON, sums in force, whether to wake it) of a group a report planned."""
Peer = tuple[str, str, NamespaceKey, Figures]
"""(group, reporter, namespace, figures) of another live reporter's row in a group."""

Claimed = tuple[str, int, int]
"""(owner role, rows token, admin generation) of a reporter claimed (`UsageRepository.claim`)."""


class Claim(NamedTuple):
    """A report's claim of its reporter: alive until ``until``, made for ``role`` if new."""

    reporter_id: str
    role: str
    until: datetime


class GroupRow(NamedTuple):
    """What a grant reads of its group's row (`app.models.QuotaGroup`)."""

    marker: int
    levels: str | None
    in_force: tuple[float, ...]


@dataclass
class _Shared:
    """What the reports stored in one transaction share (`app.quota.lanes` stores several of
    one namespace together): each would otherwise make the same round trips."""

    transaction: weakref.ref[SessionTransaction]
    """Which (held weakly: held, it would tie the session, which holds this in its info, in
    a cycle that only the garbage collector frees, a whole session's objects at every
    report, and Spark workers' reports stalled for 90 ms whenever it did)."""
    moved: bool = False
    """Whether it may have moved markers: looks at them that the process shares (made
    before, or by others) no longer tell it what moved."""
    locked: set[str] = field(default_factory=set)
    """Groups whose lock the transaction holds."""
    groups: dict[str, GroupRow] = field(default_factory=dict)
    """Rows of groups it holds, as it last read or wrote them: nothing else writes them
    until it ends, so the next report of the group it stores reads them here."""


_SHARED = "usage_reports"


class UsageRepository:
    """The queries of usage reporting on one connection (a report's transaction).

    Results of thousands of rows are fetched whole (``.all()``): iterated, a result fetches
    them from the driver one at a time."""

    __slots__ = ("connection", "shared", "sql")

    def __init__(self, connection: Connection, shared: _Shared | None = None) -> None:
        self.connection = connection
        self.sql: Statements = statements_for(connection)
        self.shared = shared

    @classmethod
    def of(cls, session: Session) -> UsageRepository:
        """On the session's connection: plain rows, not the ORM's result machinery."""
        connection = session.connection()  # begins the transaction, if none has begun
        transaction = session.get_transaction()
        assert transaction is not None  # begun above
        shared: _Shared | None = session.info.get(_SHARED)
        if shared is None or shared.transaction() is not transaction:
            shared = session.info[_SHARED] = _Shared(weakref.ref(transaction))
        return cls(connection, shared)

    def _run(self, statement: Any, parameters: Any = None) -> Any:
        return self.connection.execute(statement, parameters)

    # Reports and their settings

    def generation(self) -> int:
        """The admin generation: it changes on every write to groups, tenants, namespaces
        and the default group."""
        token: int = self._run(self.sql.generation).scalar_one()
        return token

    def effective(self, keys: Sequence[NamespaceKey]) -> Iterable[Any]:
        """(tenant, name, effective group, its six rates, its mode) of each namespace that
        exists."""
        return self._run(self.sql.namespaces, self.sql.keys(keys)).all()  # type: ignore[no-any-return]

    def grants(self, role: str, keys: Sequence[NamespaceKey]) -> Iterable[Any]:
        """(tenant, namespace, actions) that `role` is granted on those of `keys` it has."""
        return self._run(self.sql.grants, {"role": role, **self.sql.keys(keys)}).all()  # type: ignore[no-any-return]

    def tenant_admins(self, tenants: Sequence[str]) -> Iterable[Any]:
        """(tenant, admin roles) of those of `tenants` that exist."""
        return self._run(self.sql.tenant_admins, {"tenant_names": list(tenants)}).all()  # type: ignore[no-any-return]

    # Reporters

    def claim(self, reporter_id: str, role: str, until: datetime) -> Claimed:
        """Mark the reporter alive until ``until`` (made if new): its owner role, its rows
        token, and the admin generation, in one statement.

        On PostgreSQL the same statement has this transaction's commit not wait for the
        disk: usage rows are soft state, rewritten every few intervals, and a crash may lose
        their last moments; waiting cost a Spark worker's report more than its work.
        """
        owner, token, generation = self._run(
            self.sql.claim,
            {"reporter_id": reporter_id, "role": role, "until": until, "token": new_token()},
        ).one()[:3]
        return owner, token, generation

    def claim_all(self, claims: Sequence[Claim]) -> dict[str, Claimed]:
        """Claim the reporters of several reports at once, as their own `claim`s would,
        and return what each was claimed as: on PostgreSQL, in one statement, which locks
        their rows in one order (reporters before groups, as every report and release
        locks them). A reporter with two reports among them is claimed for its first; its
        second claims its own. SQLite holds the database's write lock already: there, each
        report claims its own (nothing is returned)."""
        if not claims or not self.sql.postgresql:
            return {}
        first: dict[str, Claim] = {}
        for claim in claims:
            first.setdefault(claim.reporter_id, claim)
        ordered = [first[reporter] for reporter in sorted(first)]
        rows = self._run(
            self.sql.claim_arrays,
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

    def extend(self, reporter_id: str, until: datetime) -> None:
        """Move the end of the reporter's lease (its answer's lease was not the one guessed)."""
        self._run(self.sql.extend, {"reporter": reporter_id, "until": until})

    def owner(self, reporter_id: str) -> tuple[str, int] | None:
        """The reporter's owner role and rows token, None for an unknown reporter."""
        found = self._run(self.sql.owner, {"reporter_id": reporter_id}).one_or_none()
        return None if found is None else (found[0], found[1])

    def retoken(self, reporter_id: str, token: int) -> None:
        self._run(self.sql.retoken, {"reporter": reporter_id, "token": token})

    def live_reporters(
        self, role: str, reporter_id: str, keys: Sequence[NamespaceKey], now: datetime
    ) -> Iterable[tuple[str, str, int]]:
        """(tenant, namespace, count) of the role's other live reporters in those namespaces."""
        parameters = {
            "role": role,
            "reporter_id": reporter_id,
            "now": now,
            **self.sql.keys(keys),
        }
        return self._run(self.sql.live_reporters, parameters)  # type: ignore[no-any-return]

    def keep(self, reporter_ids: Sequence[str], until: datetime) -> set[str]:
        """Keep those of the reporters still counted alive until ``until`` at least;
        returns them (the others are gone, or never reported)."""
        kept = set(self._run(self.sql.lock_reporters, {"reporters": reporter_ids}).scalars())
        if kept:
            self._run(self.sql.keep, {"reporters": sorted(kept), "until": until})
        return kept

    def job_reporters(self, job: str, role: str | None) -> list[str]:
        """The reporters of the job (`rgspark.wire.job_of`), of ``role`` only unless None; on
        PostgreSQL locked, in name order (the order a batch of reports locks them in)."""
        low, high = job_range(job)
        statement = _job_reporters(self.sql.postgresql, of_role=role is not None)
        return list(self._run(statement, {"low": low, "high": high, "role": role}).scalars())

    def silent(self, now: datetime) -> list[str]:
        """Reporters whose lease ran out before ``now`` (none that a report is claiming)."""
        return list(self._run(self.sql.silent, {"now": now}).scalars())

    def any_silent(self, now: datetime) -> bool:
        """Whether some reporter's lease ran out before ``now``, without locking any."""
        return self._run(self.sql.any_silent, {"now": now}).first() is not None

    def forget(self, reporter_ids: list[str], now: datetime) -> None:
        """Drop the reporters with their rows, and re-mark the groups they counted in."""
        self._markers_move()
        self._forget_groups(None)
        parameters = {"reporters": reporter_ids}
        leaving = count(
            (row[0], row[1:]) for row in self._run(self.sql.allocations_of_reporters, parameters)
        )
        # Reporters before groups (in name order, by their new markers), the order a report
        # locks them in.
        self._run(self.sql.forget_reporters, parameters)  # their rows go by cascade
        self.move_markers(leaving, now)
        self.take_in_force(leaving)

    def forget_deleted_groups(self) -> None:
        self._markers_move()
        self._forget_groups(None)
        self._run(self.sql.forget_markers)

    # A reporter's rows

    def rows(self, reporter_id: str) -> dict[NamespaceKey, Row]:
        return {
            (row[0], row[1]): Row(tuple(row[4:]), row[2], row[3])
            for row in self._run(self.sql.rows, {"reporter_id": reporter_id}).all()
        }

    def upsert(self, reporter_id: str, now: datetime, rows: Sequence[Written]) -> None:
        """Write the reporter's rows, each (namespace, group, planned marker, figures), as
        written at ``now``."""
        if not rows:
            return
        if self.sql.postgresql:
            self._run(self.sql.upsert_arrays, _upserted(reporter_id, now, rows))
            return
        written = []
        for (tenant, namespace), group, marker, values in rows:
            row = dict(zip(FIGURE_COLUMNS, values, strict=True))
            row.update(
                reporter_id=reporter_id,
                tenant=tenant,
                namespace=namespace,
                written_at=now,
                resource_group=group,
                planned_marker=marker,
            )
            written.append(row)
        self._run(self.sql.upsert, written)

    def write(
        self,
        reporter_id: str,
        now: datetime,
        rows: Sequence[Written],
        groups: Sequence[Saved],
        moving: Collection[str],
        token: int | None,
    ) -> set[str]:
        """`upsert` the rows, `save_groups` the groups, and give the reporter's rows a new
        ``token`` (unless None); on PostgreSQL, all three in one statement. Returns the
        groups among ``moving`` given new markers."""
        if not (self.sql.postgresql and rows and groups and token is not None):
            self.upsert(reporter_id, now, rows)
            moved = self.save_groups(groups, moving, now)
            if token is not None:
                self.retoken(reporter_id, token)
            return moved
        self._markers_move()
        written = {**_upserted(reporter_id, now, rows), "token": token}
        return self._store_groups(self.sql.write_arrays, groups, moving, now, written)

    def drop(self, reporter_id: str, keys: Sequence[NamespaceKey]) -> None:
        self._run(self.sql.drop, {"reporter_id": reporter_id, **self.sql.keys(keys)})

    # Groups: markers, locks and members

    def stale(self, reporter_id: str) -> dict[str, int]:
        """(group, marker) of the reporter's groups whose marker moved since it planned."""
        return dict(self._run(self.sql.stale, {"reporter_id": reporter_id}).all())

    def changed_markers(
        self, since: datetime, limit: int, now: float, shared: MarkerLook | None = None
    ) -> tuple[list[tuple[str, int]], MarkerLook | None]:
        """(group, marker) of up to ``limit`` groups whose marker changed after ``since``,
        oldest change first; and the look made (at ``now``) to find them, if one was.

        ``shared``, the process's last look, serves if it can tell (`MarkerLook.after`) and
        nothing in the transaction moved a marker. A look made here reaches
        `SHARED_LOOK_BACK` further back and `SHARED_LOOK_EXTRA` further on than asked, so
        that reports that looked a moment earlier or have more groups find their answer in it.
        Only the process's looks are shared: a report of more groups than
        `app.quota.tuning.FEW_GROUPS` names several namespaces, so it takes no lane and has a
        transaction of its own, in which a look of its own would never serve twice
        (``benchmarks.usage_ingest --shape broker --quick``: 0 of 127 looks).
        """
        found = None if shared is None or self.moved else shared.after(since, limit)
        if found is not None:
            return found, None
        look_since, most = since - SHARED_LOOK_BACK, limit + SHARED_LOOK_EXTRA
        rows = self._run(self.sql.changed_markers, {"since": look_since, "limit": most}).all()
        made = MarkerLook(
            at=now,
            since=look_since,
            found=[(name, marker, _aware(at)) for name, marker, at in rows],
            complete=len(rows) < most,
        )
        found = made.after(since, limit)
        if found is None:
            # So many changed in the look back that the look did not reach ``limit`` of
            # those after ``since`` (a broker's report moves thousands): looked at as asked.
            rows = self._run(self.sql.changed_markers, {"since": since, "limit": limit}).all()
            found = [(name, marker) for name, marker, _ in rows]
        return found, made

    @property
    def moved(self) -> bool:
        """Whether this transaction may have moved markers."""
        return self.shared is not None and self.shared.moved

    def _markers_move(self) -> None:
        """This transaction may move markers: a look at them made before no longer holds."""
        if self.shared is not None:
            self.shared.moved = True

    def move_markers(self, groups: Iterable[str], now: datetime) -> None:
        """Give the groups new markers: their reporters plan them again at their next report."""
        # Sorted: concurrent reports lock markers in one order, so never wait on each other.
        names = sorted(set(groups))
        if not names:
            return
        self._markers_move()
        self._forget_groups(names)
        if self.sql.postgresql:
            markers = _Array(new_tokens(len(names)))
            self._run(
                self.sql.move_markers_arrays,
                {"names": _Array(names), "markers": markers, "now": now},
            )
            return
        rows = [{"name": group, "marker": new_token(), "now": now} for group in names]
        self._run(self.sql.move_markers, rows)

    def group_rows(self, groups: list[str]) -> dict[str, GroupRow]:
        """Each group's marker, summary (its JSON, None if never summarized) and sums in
        force; a group that has no row is left out."""
        shared = self.shared
        known = {} if shared is None else shared.groups
        found = {group: row for group in groups if (row := known.get(group)) is not None}
        unknown = [group for group in groups if group not in found] if found else groups
        if unknown:
            read = {
                row[0]: GroupRow(row[1], row[2], tuple(row[3:]))
                for row in self._run(self.sql.group_rows, {"groups": unknown}).all()
            }
            found.update(read)
            if shared is not None:
                known.update((group, row) for group, row in read.items() if group in shared.locked)
        return found

    def markers(self, groups: Sequence[str]) -> dict[str, int]:
        """Each group's marker now; a group that has no row is left out."""
        return dict(self._run(self.sql.markers, {"groups": list(groups)}).all())

    def wakes(self, groups: Sequence[str]) -> dict[str, int]:
        """Each group's wake (`app.quota.leases`); a group that has no row is left out."""
        return dict(self._run(self.sql.wakes, {"groups": list(groups)}).all())

    def save_groups(
        self, groups: Sequence[Saved], moving: Collection[str], now: datetime
    ) -> set[str]:
        """Store each (group, summary JSON, sums in force, whether to wake it), in one
        statement, giving those among ``moving`` new markers too (as `move_markers` does);
        returns those."""
        moved = {group for group, *_ in groups if group in moving}
        if not groups:
            return moved
        self._markers_move()
        if self.sql.postgresql:
            return self._store_groups(self.sql.save_groups_arrays, groups, moved, now, {})
        rows = []
        for group, levels, in_force, woken in groups:
            parameters: dict[str, Any] = {
                "group_name": group,
                "group_levels": levels,
                "woken": int(woken),
            }
            parameters.update(zip(self.sql.set_in_force, in_force, strict=True))
            rows.append(parameters)
        self._run(self.sql.save_group, rows)
        self._forget_groups([group for group, *_ in groups])
        self.move_markers(moved, now)
        return moved

    def _store_groups(
        self,
        statement: Any,
        groups: Sequence[Saved],
        moving: Collection[str],
        now: datetime,
        parameters: dict[str, Any],
    ) -> set[str]:
        """Run ``statement`` (one that stores the groups as `Statements.save_groups_arrays`
        does) with ``parameters`` and the groups' own, those among ``moving`` given new
        markers; remember the groups' rows as stored. Returns the groups given markers."""
        moved = {group for group, *_ in groups if group in moving}
        names, summaries, sums, wakes = zip(*groups, strict=True)
        tokens = iter(new_tokens(len(moved)))
        markers = [next(tokens) if name in moved else None for name in names]
        arrays: dict[str, Any] = {
            **parameters,
            "group_names": _Array(names),
            "levels": _Array(summaries),
            "woken": _Array([int(woken) for woken in wakes]),
            "markers": _Array(markers),
            "now": now,
        }
        for name, values in zip(self.sql.set_in_force, zip(*sums, strict=True), strict=True):
            arrays[name] = _Array(values)
        self._run(statement, arrays)
        self._remember_groups(groups, markers)
        return moved

    def _remember_groups(self, groups: Sequence[Saved], markers: Sequence[int | None]) -> None:
        """The rows of groups just stored, as stored, for the transaction's next reads (new
        markers given, or the ones read)."""
        if self.shared is None:
            return
        known, locked = self.shared.groups, self.shared.locked
        for (group, levels, in_force, _), marker in zip(groups, markers, strict=True):
            read = known.get(group)
            if marker is None and read is not None:
                marker = read.marker
            if group in locked and marker is not None:  # else not held, or its marker unknown
                known[group] = GroupRow(marker, levels, tuple(in_force))

    def _forget_groups(self, groups: Iterable[str] | None) -> None:
        """The rows of those groups (of all, if None) are changed: read them again."""
        if self.shared is None:
            return
        if groups is None:
            self.shared.groups.clear()
            return
        for group in groups:
            self.shared.groups.pop(group, None)

    def take_in_force(self, leaving: Mapping[str, Sequence[float]]) -> None:
        """Take the allocations of rows that left groups (summed per group) out of the
        groups' sums in force, as `app.quota.planner.take` has it: groups that this
        transaction holds (`lock`, `move_markers`), so read and written in turn."""
        if not leaving:
            return
        self._markers_move()
        self._forget_groups(leaving)
        names = sorted(leaving)  # in the order reports lock groups
        rows = []
        for name, *in_force in self._run(self.sql.in_force, {"groups": names}).all():
            after, woken = take(in_force, leaving[name])
            parameters: dict[str, Any] = {"group_name": name, "woken": int(woken)}
            parameters.update(zip(self.sql.set_in_force, after, strict=True))
            rows.append(parameters)
        if rows:
            self._run(self.sql.take_in_force, rows)

    def lock(self, groups: Iterable[str], now: datetime) -> None:
        """Hold the groups (their plans and markers) until this transaction ends; see
        `app.quota.store`. All in one statement: a report takes no group's lock after.
        (Groups that an earlier report of the transaction locked are held already.)"""
        names = sorted(set(groups) - (self.shared.locked if self.shared is not None else set()))
        if not names:
            return
        if self.sql.postgresql:
            # The groups given rows, with new markers (the others were there already).
            if self._run(self.sql.lock_groups, {"groups": names, "now": now}).all():
                self._markers_move()
        else:
            self._markers_move()  # a group without a row gets one, with a new marker
            self._run(self.sql.lock_groups, {"groups": json.dumps(names), "now": now})
        if self.shared is not None:
            self.shared.locked.update(names)

    def peers(
        self, reporter_id: str, groups: list[str], now: datetime
    ) -> tuple[list[Peer], list[tuple[str, Rates]]]:
        """The other live reporters' rows counted in the groups (those last written in
        them); and (group, allocations) of every other reporter's row counted in them, alive
        or not (what the groups' sums in force count of them).

        Two reads, each of one table by one of its keys: the rows counted in the groups,
        then which of their reporters are alive. As one join, PostgreSQL planned it from
        statistics that a starting fleet outgrows within a minute, before anything gathers
        them again: it took the reporters for a few rows and read every row of every live
        reporter to keep those of the groups (with 40 brokers of 5,000 namespaces, 800,000
        rows compared to keep 20,000: 0.2-0.4 s a report, growing with each broker). Each
        read alone has one sensible plan, whatever the statistics say, and the few rows of
        reporters gone that the first reads are left out here."""
        rows = self._run(self.sql.peers, {"reporter_id": reporter_id, "groups": groups}).all()
        if not rows:
            return [], []
        counted = [(row[0], tuple(row[4 + at] for at in ALLOCATIONS)) for row in rows]
        reporters = list({row[1] for row in rows})
        alive = set(self._run(self.sql.alive, {"reporters": reporters, "now": now}).scalars())
        live = [(row[0], row[1], (row[2], row[3]), row[4:]) for row in rows if row[1] in alive]
        return live, counted


@functools.cache
def _job_reporters(postgresql: bool, *, of_role: bool) -> Select[str]:
    """`UsageRepository.job_reporters`' statement.

    A range on the primary key rather than LIKE, in which the ``_`` that job ids may hold
    matches any character (``ab_c-%`` would match ``abXc-...``, another job's). The range
    holds in byte order only: PostgreSQL compares in the column's collation, and a
    language's may weigh punctuation apart or ignore case (ICU's ``en`` puts ``AB-x``
    between ``ab-`` and ``ab.``), so there the comparison is made in ``C``. Its index then
    serves only a database whose collation is ``C``; elsewhere this reads the whole table,
    one row per live worker, once when a job ends."""
    reporter_id = QuotaReporter.reporter_id
    key = reporter_id.collate("C") if postgresql else reporter_id
    statement = select(reporter_id).where(key >= bindparam("low"), key < bindparam("high"))
    if of_role:
        statement = statement.where(QuotaReporter.role == bindparam("role"))
    statement = statement.order_by(reporter_id)
    return statement.with_for_update() if postgresql else statement


def _upserted(reporter_id: str, now: datetime, rows: Sequence[Written]) -> dict[str, Any]:
    """The parameters of `Statements.upsert_arrays`."""
    keys, groups, planned, figures = zip(*rows, strict=True)
    tenants, names = zip(*keys, strict=True)
    parameters: dict[str, Any] = {
        "reporter_id": reporter_id,
        "now": now,
        "tenants": _Array(tenants),
        "names": _Array(names),
        "groups": _Array(groups),
        "planned": _Array(planned),
    }
    for column, values in zip(FIGURE_COLUMNS, zip(*figures, strict=True), strict=True):
        parameters[column] = _Array(values)
    return parameters


def _aware(moment: datetime) -> datetime:
    """SQLite gives its timestamps back without their zone, which is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
