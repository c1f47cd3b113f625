"""A reporter's rows: read, written, dropped; and its groups' other reporters' rows."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Select, String, TextClause, bindparam, delete, func, select, text
from sqlalchemy.dialects import postgresql as pg

from app.models import QuotaGroup, QuotaReporter, QuotaUsage
from app.quota.cache import Row
from app.quota.repository.groups import GroupQueries, Saved
from app.quota.repository.reporters import ReporterQueries
from app.quota.repository.sql import FIGURE_COLUMNS, _Array, among, insert, key_parameters, keys_in
from app.quota.types import ALLOCATIONS, Figures, NamespaceKey, Rates

_FIGURES = [getattr(QuotaUsage, column) for column in FIGURE_COLUMNS]

Written = tuple[NamespaceKey, str | None, int | None, Figures]
"""(namespace, group, planned marker, figures) of a row a report writes."""
Peer = tuple[str, str, NamespaceKey, Figures]
"""(group, reporter, namespace, figures) of another live reporter's row in a group."""


class RowQueries(ReporterQueries):
    """A reporter's rows, and its groups' peers."""

    __slots__ = ()

    @staticmethod
    @functools.cache
    def _rows_sql() -> Select[Any]:
        """(tenant, namespace, group, planned marker, *figures) of every row of the
        reporter."""
        return select(
            QuotaUsage.tenant,
            QuotaUsage.namespace,
            QuotaUsage.resource_group,
            QuotaUsage.planned_marker,
            *_FIGURES,
        ).where(QuotaUsage.reporter_id == bindparam("reporter_id"))

    def rows(self, reporter_id: str) -> dict[NamespaceKey, Row]:
        return {
            (row[0], row[1]): Row(tuple(row[4:]), row[2], row[3])
            for row in self._run(self._rows_sql(), {"reporter_id": reporter_id}).all()
        }

    @staticmethod
    @functools.cache
    def _upsert_sql(postgresql: bool) -> Any:
        """SQLite's: a row written."""
        # The table, not the mapped class: a Core executemany, without the ORM's bulk work.
        usage = insert(postgresql, QuotaUsage.__table__)
        return usage.on_conflict_do_update(
            index_elements=["reporter_id", "tenant", "namespace"],
            set_={
                column: usage.excluded[column]
                for column in ("written_at", "resource_group", "planned_marker", *FIGURE_COLUMNS)
            },
        )

    @staticmethod
    def _upsert_arrays() -> str:
        """PostgreSQL's: the rows written, in one statement over arrays, one per column."""
        figures = ", ".join(FIGURE_COLUMNS)
        arrays = ", ".join(f"CAST(:{column} AS DOUBLE PRECISION[])" for column in FIGURE_COLUMNS)
        updated = ", ".join(
            f"{column} = excluded.{column}"
            for column in ("written_at", "resource_group", "planned_marker", *FIGURE_COLUMNS)
        )
        return (
            "INSERT INTO quota_usage (reporter_id, tenant, namespace, written_at, "
            f"resource_group, planned_marker, {figures}) "
            f"SELECT :reporter_id, u.tenant, u.namespace, :now, u.grp, u.planned, {figures} "
            "FROM unnest(CAST(:tenants AS VARCHAR[]), CAST(:names AS VARCHAR[]), "
            f"CAST(:groups AS VARCHAR[]), CAST(:planned AS BIGINT[]), {arrays}) "
            f"AS u(tenant, namespace, grp, planned, {figures}) "
            "ON CONFLICT (reporter_id, tenant, namespace) DO UPDATE SET " + updated
        )

    @staticmethod
    @functools.cache
    def _upsert_arrays_sql() -> TextClause:
        return text(RowQueries._upsert_arrays())

    def upsert(self, reporter_id: str, now: datetime, rows: Sequence[Written]) -> None:
        """Write the reporter's rows, each (namespace, group, planned marker, figures), as
        written at ``now``."""
        if not rows:
            return
        if self.postgresql:
            self._run(self._upsert_arrays_sql(), _upserted(reporter_id, now, rows))
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
        self._run(self._upsert_sql(self.postgresql), written)

    @staticmethod
    @functools.cache
    def _write_arrays_sql() -> TextClause:
        """PostgreSQL's: a planning report's writes in one statement (one round trip, where
        three took three): its rows, as `_upsert_arrays`; the groups it planned, as
        `GroupQueries._save_groups_arrays`; and its rows' new token. Each part writes rows
        of a table of its own."""
        return text(
            f"WITH written AS ({RowQueries._upsert_arrays()}), "
            f"saved AS ({GroupQueries._save_groups_arrays()}) "
            "UPDATE quota_reporters SET rows_token = :token WHERE reporter_id = :reporter_id"
        )

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
        if not (self.postgresql and rows and groups and token is not None):
            self.upsert(reporter_id, now, rows)
            moved = self.save_groups(groups, moving, now)
            if token is not None:
                self.retoken(reporter_id, token)
            return moved
        self._markers_move()
        written = {**_upserted(reporter_id, now, rows), "token": token}
        return self._store_groups(self._write_arrays_sql(), groups, moving, now, written)

    @staticmethod
    @functools.cache
    def _drop_sql(postgresql: bool) -> Delete:
        return (
            delete(QuotaUsage)
            .where(QuotaUsage.reporter_id == bindparam("reporter_id"))
            .where(keys_in(postgresql, QuotaUsage.tenant, QuotaUsage.namespace))
        )

    def drop(self, reporter_id: str, keys: Sequence[NamespaceKey]) -> None:
        parameters = {"reporter_id": reporter_id, **key_parameters(self.postgresql, keys)}
        self._run(self._drop_sql(self.postgresql), parameters)

    @staticmethod
    @functools.cache
    def _stale_sql() -> Select[str, int]:
        """(group, marker) of the groups whose marker moved since the reporter planned
        them."""
        return (
            select(QuotaGroup.name, QuotaGroup.marker)
            .distinct()
            .join(QuotaUsage, QuotaUsage.resource_group == QuotaGroup.name)
            .where(QuotaUsage.reporter_id == bindparam("reporter_id"))
            .where(QuotaGroup.marker.is_distinct_from(QuotaUsage.planned_marker))
        )

    def stale(self, reporter_id: str) -> dict[str, int]:
        """(group, marker) of the reporter's groups whose marker moved since it planned."""
        return dict(self._run(self._stale_sql(), {"reporter_id": reporter_id}).all())

    @staticmethod
    @functools.cache
    def _peers_sql(postgresql: bool) -> Select[Any]:
        """(group, reporter, tenant, namespace, *figures) of the other reporters' rows
        counted in the groups given (live or not: see `peers`)."""
        return (
            select(
                QuotaUsage.resource_group,
                QuotaUsage.reporter_id,
                QuotaUsage.tenant,
                QuotaUsage.namespace,
                *_FIGURES,
            )
            .where(among(postgresql, QuotaUsage.resource_group, "groups"))
            .where(QuotaUsage.reporter_id != bindparam("reporter_id"))
        )

    @staticmethod
    @functools.cache
    def _alive_sql(postgresql: bool) -> Select[str]:
        """The reporters given whose lease has not run out at ``now``. On PostgreSQL joined
        with the names as a table: as ``= ANY(:reporters)`` it was planned as a scan of
        every reporter that looked for each in the whole array (41 ms for a group of 5,000,
        25 million comparisons); joined, each is looked up or hashed once."""
        live = QuotaReporter.lease_until > bindparam("now")
        if postgresql:
            given = (
                func.unnest(bindparam("reporters", type_=pg.ARRAY(String)))
                .table_valued("name")
                .render_derived()
            )
            return (
                select(QuotaReporter.reporter_id)
                .join(given, given.c.name == QuotaReporter.reporter_id)
                .where(live)
            )
        return select(QuotaReporter.reporter_id).where(
            among(False, QuotaReporter.reporter_id, "reporters"), live
        )

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
        counting = self._peers_sql(self.postgresql)
        rows = self._run(counting, {"reporter_id": reporter_id, "groups": groups}).all()
        if not rows:
            return [], []
        counted = [(row[0], tuple(row[4 + at] for at in ALLOCATIONS)) for row in rows]
        reporters = list({row[1] for row in rows})
        living = self._alive_sql(self.postgresql)
        alive = set(self._run(living, {"reporters": reporters, "now": now}).scalars())
        live = [(row[0], row[1], (row[2], row[3]), row[4:]) for row in rows if row[1] in alive]
        return live, counted


def _upserted(reporter_id: str, now: datetime, rows: Sequence[Written]) -> dict[str, Any]:
    """The parameters of `RowQueries._upsert_arrays`."""
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
