"""The SQL statements of usage reporting, built once per dialect.

Built once, a statement is also compiled once (SQLAlchemy caches the compiled form by its
structure), which matters to the many small reports of Spark workers: building and
compiling them afresh cost more than running them. On PostgreSQL a set of keys is two array
parameters however many there are; SQLite gets one parameter per value. Core selects of just
the columns needed (no ORM objects), because a report may carry thousands of namespaces.
"""

from __future__ import annotations

import functools
import os
import secrets
from array import array
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    String,
    any_,
    bindparam,
    delete,
    func,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.models import (
    DIMENSION_COLUMNS,
    RATE_COLUMNS,
    DefaultResourceGroup,
    Namespace,
    NamespacePermission,
    QuotaGroup,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    Tenant,
    admin_generation,
)
from app.quota.types import NamespaceKey

#: The ``quota_usage`` columns that hold `app.quota.types.Figures`, in its order.
FIGURE_COLUMNS = tuple(
    f"{dim}_{part}" for dim in DIMENSION_COLUMNS for part in ("usage", "demand", "allocation")
)
_FIGURES = [getattr(QuotaUsage, column) for column in FIGURE_COLUMNS]
_RATES = [getattr(ResourceGroup, column) for column in RATE_COLUMNS]
_ALLOCATIONS = [getattr(QuotaUsage, f"{dim}_allocation") for dim in DIMENSION_COLUMNS]
_IN_FORCE = [getattr(QuotaGroup, f"{dim}_in_force") for dim in DIMENSION_COLUMNS]


class Statements:
    """The statements of a report, with named parameters."""

    def __init__(self, dialect: str) -> None:
        self.postgresql = dialect == "postgresql"
        reporter: BindParameter[str] = bindparam("reporter_id")
        self._admin()
        self._reporters(reporter)
        self._rows(reporter)
        self._groups()
        self._peers(reporter)
        self._liveness(reporter)
        self._writes()

    def _admin(self) -> None:
        """What the admin state says: the generation, each namespace's group and rates."""
        default_group = select(DefaultResourceGroup.resource_group).scalar_subquery()
        group = func.coalesce(Namespace.resource_group, Tenant.resource_group, default_group)

        #: The admin generation (`app.generation`): it changes on every admin write.
        self.generation = admin_generation()

        namespaces = select(Namespace.tenant, Namespace.name, group, *_RATES, ResourceGroup.mode)
        if self.postgresql:
            # Joined from the keys rather than filtered by them: PostgreSQL then looks each
            # namespace and group up by its key, where a filter had it merge-join every group.
            keys = self._pairs()
            namespaces = namespaces.select_from(keys).join(
                Namespace, (Namespace.tenant == keys.c.tenant) & (Namespace.name == keys.c.name)
            )
        else:
            namespaces = namespaces.where(self._keys_in(Namespace.tenant, Namespace.name))
        #: (tenant, name, effective group, its six rates, its mode)
        self.namespaces = namespaces.join(Tenant, Tenant.name == Namespace.tenant).outerjoin(
            ResourceGroup, ResourceGroup.name == group
        )
        permission = NamespacePermission
        #: (tenant, namespace, actions) granted to a role on some of the keys
        self.grants = select(permission.tenant, permission.namespace, permission.actions).where(
            permission.role == bindparam("role"),
            self._keys_in(permission.tenant, permission.namespace),
        )
        #: (tenant, admin roles) of some tenants
        self.tenant_admins = select(Tenant.name, Tenant.admin_roles).where(
            self._among(Tenant.name, "tenant_names")
        )

    def _reporters(self, reporter: BindParameter[str]) -> None:
        """A reporter's claim, lease and owner."""
        self.owner = select(QuotaReporter.role, QuotaReporter.rows_token).where(
            QuotaReporter.reporter_id == reporter
        )
        reporters = self._insert(QuotaReporter.__table__)
        # The owner comes back (the role that first used the id, or this one if it is new),
        # the token of the reporter's rows, and the admin generation; on PostgreSQL, the
        # transaction's commit stops waiting for the disk (`UsageRepository.claim`).
        claimed = [
            QuotaReporter.role,
            QuotaReporter.rows_token,
            admin_generation().scalar_subquery(),
        ]
        if self.postgresql:
            claimed.append(func.set_config("synchronous_commit", "off", True))
        self.claim = (
            reporters.values(
                reporter_id=reporter,
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
        if self.postgresql:
            #: (reporter, owner, rows token, admin generation) of several claims at once, in
            #: the reporters' order (`UsageRepository.claim_all`)
            pg = postgresql.dialect()  # type: ignore[no-untyped-call]
            generation = admin_generation().compile(
                dialect=pg, compile_kwargs={"literal_binds": True}
            )
            self.claim_arrays = text(
                "INSERT INTO quota_reporters (reporter_id, role, lease_until, rows_token) "
                "SELECT * FROM unnest(CAST(:reporters AS VARCHAR[]), CAST(:roles AS VARCHAR[]), "
                "CAST(:untils AS TIMESTAMPTZ[]), CAST(:tokens AS BIGINT[])) AS v ORDER BY 1 "
                "ON CONFLICT (reporter_id) DO UPDATE SET lease_until = excluded.lease_until "
                f"RETURNING reporter_id, role, rows_token, ({generation}), "
                "set_config('synchronous_commit', 'off', true)"
            )
        self.extend = (
            update(QuotaReporter)
            .where(QuotaReporter.reporter_id == bindparam("reporter"))
            .values(lease_until=bindparam("until"))
        )
        self.retoken = (
            update(QuotaReporter)
            .where(QuotaReporter.reporter_id == bindparam("reporter"))
            .values(rows_token=bindparam("token"))
        )

    def _rows(self, reporter: BindParameter[str]) -> None:
        """A reporter's rows, and its groups whose markers moved."""
        #: (tenant, namespace, group, planned marker, *figures) of every row of the reporter
        self.rows = select(
            QuotaUsage.tenant,
            QuotaUsage.namespace,
            QuotaUsage.resource_group,
            QuotaUsage.planned_marker,
            *_FIGURES,
        ).where(QuotaUsage.reporter_id == reporter)
        #: (group, marker) of the groups whose marker moved since the reporter planned them
        self.stale = (
            select(QuotaGroup.name, QuotaGroup.marker)
            .distinct()
            .join(QuotaUsage, QuotaUsage.resource_group == QuotaGroup.name)
            .where(QuotaUsage.reporter_id == reporter)
            .where(QuotaGroup.marker.is_distinct_from(QuotaUsage.planned_marker))
        )

    def _groups(self) -> None:
        """Groups' rows: their markers, wakes, summaries and sums in force."""
        #: (name, marker, levels, *in force per dimension) of the groups given
        self.group_rows = select(
            QuotaGroup.name, QuotaGroup.marker, QuotaGroup.levels, *_IN_FORCE
        ).where(self._among(QuotaGroup.name, "groups"))
        # ("group_name": an UPDATE reserves column names for its SET.)
        self.save_group = (
            update(QuotaGroup)
            .where(QuotaGroup.name == bindparam("group_name"))
            .values(
                levels=bindparam("group_levels"),
                wake=QuotaGroup.wake + bindparam("woken"),
                **{column.key: bindparam(f"set_{column.key}") for column in _IN_FORCE},
            )
        )
        #: (name, marker) of the groups given
        self.markers = select(QuotaGroup.name, QuotaGroup.marker).where(
            self._among(QuotaGroup.name, "groups")
        )
        #: (name, wake) of the groups given
        self.wakes = select(QuotaGroup.name, QuotaGroup.wake).where(
            self._among(QuotaGroup.name, "groups")
        )
        self.set_in_force = [f"set_{column.key}" for column in _IN_FORCE]
        #: (name, *in force per dimension) of the groups given
        self.in_force = select(QuotaGroup.name, *_IN_FORCE).where(
            self._among(QuotaGroup.name, "groups")
        )
        #: A group's sums in force once rows left it, and its wake moved if they woke it
        self.take_in_force = (
            update(QuotaGroup)
            .where(QuotaGroup.name == bindparam("group_name"))
            .values(
                wake=QuotaGroup.wake + bindparam("woken"),
                **{column.key: bindparam(f"set_{column.key}") for column in _IN_FORCE},
            )
        )
        #: (name, marker, changed_at) of every group whose marker changed after ``since``
        self.changed_markers = (
            select(QuotaGroup.name, QuotaGroup.marker, QuotaGroup.changed_at)
            .where(QuotaGroup.changed_at > bindparam("since"))
            .order_by(QuotaGroup.changed_at)
            .limit(bindparam("limit"))
        )
        markers = self._insert(QuotaGroup.__table__)
        self.move_markers = markers.values(
            name=bindparam("name"), marker=bindparam("marker"), changed_at=bindparam("now")
        ).on_conflict_do_update(
            index_elements=["name"],
            set_={"marker": markers.excluded.marker, "changed_at": markers.excluded.changed_at},
        )
        # NOT EXISTS, not NOT IN: PostgreSQL then looks each marker's group up by its key,
        # where NOT IN hashed every group's name (tens of ms with 100,000 groups, once an
        # interval in every process).
        self.forget_markers = delete(QuotaGroup).where(
            ~select(ResourceGroup.name).where(ResourceGroup.name == QuotaGroup.name).exists()
        )

    def _peers(self, reporter: BindParameter[str]) -> None:
        """A group's other reporters' rows, which of them live; a reporter's rows written."""
        #: (group, reporter, tenant, namespace, *figures) of the other reporters' rows
        #: counted in the groups given (live or not: see `UsageRepository.peers`)
        self.peers = (
            select(
                QuotaUsage.resource_group,
                QuotaUsage.reporter_id,
                QuotaUsage.tenant,
                QuotaUsage.namespace,
                *_FIGURES,
            )
            .where(self._among(QuotaUsage.resource_group, "groups"))
            .where(QuotaUsage.reporter_id != reporter)
        )
        #: The reporters given whose lease has not run out at ``now``. On PostgreSQL joined
        #: with the names as a table: as ``= ANY(:reporters)`` it was planned as a scan of
        #: every reporter that looked for each in the whole array (41 ms for a group of
        #: 5,000, 25 million comparisons); joined, each is looked up or hashed once.
        live = QuotaReporter.lease_until > bindparam("now")
        if self.postgresql:
            given = (
                func.unnest(bindparam("reporters", type_=postgresql.ARRAY(String)))
                .table_valued("name")
                .render_derived()
            )
            self.alive = (
                select(QuotaReporter.reporter_id)
                .join(given, given.c.name == QuotaReporter.reporter_id)
                .where(live)
            )
        else:
            self.alive = select(QuotaReporter.reporter_id).where(
                self._among(QuotaReporter.reporter_id, "reporters"), live
            )
        # The table, not the mapped class: a Core executemany, without the ORM's bulk work.
        usage = self._insert(QuotaUsage.__table__)
        self.upsert = usage.on_conflict_do_update(
            index_elements=["reporter_id", "tenant", "namespace"],
            set_={
                column: usage.excluded[column]
                for column in ("written_at", "resource_group", "planned_marker", *FIGURE_COLUMNS)
            },
        )
        self.drop = (
            delete(QuotaUsage)
            .where(QuotaUsage.reporter_id == reporter)
            .where(self._keys_in(QuotaUsage.tenant, QuotaUsage.namespace))
        )

    def _liveness(self, reporter: BindParameter[str]) -> None:
        """Silent reporters, and a role's live ones."""
        #: Reporters whose lease ran out before ``now``; on PostgreSQL, not one that a
        #: report is claiming right now (it is back, and waiting on it could deadlock).
        self.silent = select(QuotaReporter.reporter_id).where(
            QuotaReporter.lease_until < bindparam("now")
        )
        self.any_silent = self.silent.limit(1)
        if self.postgresql:
            self.silent = self.silent.with_for_update(skip_locked=True)
        #: Reporters of reports waiting in line, locked in name order (the order a batch's
        #: claim locks them in), then their leases moved to at least ``until``.
        self.lock_reporters = (
            select(QuotaReporter.reporter_id)
            .where(self._among(QuotaReporter.reporter_id, "reporters"))
            .order_by(QuotaReporter.reporter_id)
        )
        if self.postgresql:
            self.lock_reporters = self.lock_reporters.with_for_update()
        self.keep = (
            update(QuotaReporter)
            .where(self._among(QuotaReporter.reporter_id, "reporters"))
            .where(QuotaReporter.lease_until < bindparam("until"))
            .values(lease_until=bindparam("until"))
        )
        #: (tenant, namespace, count) of a role's other live reporters in the given namespaces
        self.live_reporters = (
            select(QuotaUsage.tenant, QuotaUsage.namespace, func.count())
            .join(QuotaReporter, QuotaReporter.reporter_id == QuotaUsage.reporter_id)
            .where(QuotaReporter.role == bindparam("role"))
            .where(QuotaReporter.lease_until > bindparam("now"))
            .where(QuotaUsage.reporter_id != reporter)
            .where(self._keys_in(QuotaUsage.tenant, QuotaUsage.namespace))
            .group_by(QuotaUsage.tenant, QuotaUsage.namespace)
        )

    def _writes(self) -> None:
        """The groups' locks, the writes of a report at once, and forgetting reporters."""
        #: On PostgreSQL, the locks that order the reports of a group (see
        #: `app.quota.store`): each group's marker row, made if missing, locked to the end
        #: of the transaction, all of a report's in one statement in one order, so that no
        #: two reports wait on each other in a cycle. Row locks live in the rows, not in the
        #: server's lock table, which a report of thousands of groups would exhaust. (An
        #: ON CONFLICT whose update never applies still locks the row it found.) On SQLite,
        #: whose writers are serialized already, the rows are only made.
        self.lock_groups = self._lock_groups() if self.postgresql else self._make_groups()
        #: On PostgreSQL, a report's rows, its groups' summaries and their new markers are
        #: each written by one statement over arrays, one per column: a broker's report
        #: writes thousands of each, which as many statements cost the database and the
        #: driver more than the writing itself. (SQLite runs the ones above, row by row.)
        if self.postgresql:
            self.upsert_arrays = text(self._upsert_arrays())
            self.save_groups_arrays = text(self._save_groups_arrays())
            self.write_arrays = text(self._write_arrays())
            self.move_markers_arrays = self._move_markers_arrays()
        #: (group, *allocations per dimension) of each of the given reporters' rows in a group
        self.allocations_of_reporters = select(QuotaUsage.resource_group, *_ALLOCATIONS).where(
            QuotaUsage.resource_group.is_not(None),
            self._among(QuotaUsage.reporter_id, "reporters"),
        )
        self.forget_reporters = delete(QuotaReporter).where(
            self._among(QuotaReporter.reporter_id, "reporters")
        )

    @staticmethod
    def _make_groups() -> Any:
        """SQLite's: the groups' rows, made if missing (its writers take turns already)."""
        return text(
            "INSERT INTO quota_groups (name, marker, changed_at) "
            "SELECT value, abs(random()), :now FROM json_each(:groups) WHERE true "
            "ON CONFLICT (name) DO NOTHING"
        ).bindparams(bindparam("now", type_=QuotaGroup.__table__.c.changed_at.type))

    @staticmethod
    def _lock_groups() -> Any:
        return text(
            "INSERT INTO quota_groups (name, marker, changed_at) "
            "SELECT g, floor(random() * 9.2e18)::bigint, :now "
            "FROM unnest(CAST(:groups AS VARCHAR[])) AS g ORDER BY g "
            "ON CONFLICT (name) DO UPDATE SET marker = quota_groups.marker WHERE false "
            "RETURNING name"
        )

    @staticmethod
    def _upsert_arrays() -> str:
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
    def _save_groups_arrays() -> str:
        """Stores groups' summaries, sums in force and wakes; and, where a marker is given,
        the group's new marker (as `move_markers`)."""
        in_force = [column.key for column in _IN_FORCE]
        arrays = ", ".join(f"CAST(:set_{column} AS DOUBLE PRECISION[])" for column in in_force)
        return (
            "UPDATE quota_groups AS g SET levels = v.levels, wake = g.wake + v.woken, "
            "marker = COALESCE(v.marker, g.marker), "
            "changed_at = CASE WHEN v.marker IS NULL THEN g.changed_at ELSE :now END, "
            + ", ".join(f"{column} = v.{column}" for column in in_force)
            + " FROM unnest(CAST(:group_names AS VARCHAR[]), CAST(:levels AS TEXT[]), "
            f"CAST(:woken AS INTEGER[]), CAST(:markers AS BIGINT[]), {arrays}) "
            f"AS v(name, levels, woken, marker, {', '.join(in_force)}) WHERE g.name = v.name"
        )

    @classmethod
    def _write_arrays(cls) -> str:
        """A planning report's writes in one statement (one round trip, where three took
        three): its rows, as `upsert_arrays`; the groups it planned, as `save_groups_arrays`;
        and its rows' new token. Each part writes rows of a table of its own."""
        return (
            f"WITH written AS ({cls._upsert_arrays()}), saved AS ({cls._save_groups_arrays()}) "
            "UPDATE quota_reporters SET rows_token = :token WHERE reporter_id = :reporter_id"
        )

    @staticmethod
    def _move_markers_arrays() -> Any:
        # In name order, as every report locks groups (see `app.quota.store`).
        return text(
            "INSERT INTO quota_groups (name, marker, changed_at) "
            "SELECT r.name, r.marker, :now "
            "FROM unnest(CAST(:names AS VARCHAR[]), CAST(:markers AS BIGINT[])) "
            "AS r(name, marker) ORDER BY r.name "
            "ON CONFLICT (name) DO UPDATE SET marker = excluded.marker, "
            "changed_at = excluded.changed_at"
        )

    def _insert(self, table: Any) -> Any:
        return postgresql.insert(table) if self.postgresql else sqlite.insert(table)

    def _among(self, column: Any, name: str) -> ColumnElement[bool]:
        if self.postgresql:
            condition: ColumnElement[bool] = column == any_(
                bindparam(name, type_=postgresql.ARRAY(String))
            )
            return condition
        return column.in_(bindparam(name, expanding=True))  # type: ignore[no-any-return]

    def _pairs(self) -> Any:
        """On PostgreSQL, the keys as a table of (tenant, name)."""
        return (
            func.unnest(
                bindparam("tenants", type_=postgresql.ARRAY(String)),
                bindparam("names", type_=postgresql.ARRAY(String)),
            )
            .table_valued("tenant", "name")
            .render_derived()
        )

    def _keys_in(self, tenant: Any, name: Any) -> ColumnElement[bool]:
        if self.postgresql:
            pairs = self._pairs()
            return tuple_(tenant, name).in_(select(pairs.c.tenant, pairs.c.name))
        return tuple_(tenant, name).in_(bindparam("keys", expanding=True))

    def keys(self, keys: Sequence[NamespaceKey]) -> dict[str, Any]:
        """The parameters that a set of namespace keys takes."""
        if self.postgresql:
            return {"tenants": [key[0] for key in keys], "names": [key[1] for key in keys]}
        return {"keys": list(keys)}


@functools.cache
def _statements(dialect: str) -> Statements:
    return Statements(dialect)


def statements_for(connection: Connection) -> Statements:
    return _statements(connection.dialect.name)


def new_token() -> int:
    """A random token: rows tokens, plan ids and markers are told apart by these."""
    return secrets.randbits(63)


def new_tokens(count: int) -> list[int]:
    """``count`` tokens as `new_token` makes them, from one read of the system's random
    source rather than one each: a broker's report makes thousands."""
    return [word >> 1 for word in array("Q", os.urandom(8 * count))]
