"""Groups' rows: their markers, locks, wakes, summaries and sums in force."""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, TextClause, Update, bindparam, select, text, update

from app.models import DIMENSION_COLUMNS, QuotaGroup
from app.quota.planner import take
from app.quota.repository.base import GroupRow, Queries
from app.quota.repository.sql import _Array, among, insert
from app.quota.tokens import new_token, new_tokens

_IN_FORCE = [getattr(QuotaGroup, f"{dim}_in_force") for dim in DIMENSION_COLUMNS]
#: The parameters of the sums in force that a group's row is given.
_SET_IN_FORCE = [f"set_{column.key}" for column in _IN_FORCE]

Saved = tuple[str, str | None, Sequence[float], bool]
"""(group, summary JSON, sums in force, whether to wake it) of a group a report planned."""


class GroupQueries(Queries):
    """Groups: markers, locks and members."""

    __slots__ = ()

    @staticmethod
    @functools.cache
    def _changed_markers_sql() -> Select[str, int]:
        """(name, marker) of the groups whose marker changed after ``since``."""
        return (
            select(QuotaGroup.name, QuotaGroup.marker)
            .where(QuotaGroup.changed_at > bindparam("since"))
            .order_by(QuotaGroup.changed_at)
            .limit(bindparam("limit"))
        )

    def changed_markers(self, since: datetime, limit: int) -> list[tuple[str, int]]:
        """(group, marker) of up to ``limit`` groups whose marker changed after ``since``,
        oldest change first."""
        rows = self._run(self._changed_markers_sql(), {"since": since, "limit": limit})
        return [(name, marker) for name, marker in rows]

    @staticmethod
    @functools.cache
    def _move_markers_sql(postgresql: bool) -> Any:
        """SQLite's: a group's new marker, its row made if missing."""
        markers = insert(postgresql, QuotaGroup.__table__)
        return markers.values(
            name=bindparam("name"), marker=bindparam("marker"), changed_at=bindparam("now")
        ).on_conflict_do_update(
            index_elements=["name"],
            set_={"marker": markers.excluded.marker, "changed_at": markers.excluded.changed_at},
        )

    @staticmethod
    @functools.cache
    def _move_markers_arrays_sql() -> TextClause:
        """PostgreSQL's: the groups' new markers, in one statement over arrays."""
        # In name order, as every report locks groups (see `app.quota.store`).
        return text(
            "INSERT INTO quota_groups (name, marker, changed_at) "
            "SELECT r.name, r.marker, :now "
            "FROM unnest(CAST(:names AS VARCHAR[]), CAST(:markers AS BIGINT[])) "
            "AS r(name, marker) ORDER BY r.name "
            "ON CONFLICT (name) DO UPDATE SET marker = excluded.marker, "
            "changed_at = excluded.changed_at"
        )

    def move_markers(self, groups: Iterable[str], now: datetime) -> None:
        """Give the groups new markers: their reporters plan them again at their next report."""
        # Sorted: concurrent reports lock markers in one order, so never wait on each other.
        names = sorted(set(groups))
        if not names:
            return
        self._markers_move()
        self._forget_groups(names)
        if self.postgresql:
            markers = _Array(new_tokens(len(names)))
            self._run(
                self._move_markers_arrays_sql(),
                {"names": _Array(names), "markers": markers, "now": now},
            )
            return
        rows = [{"name": group, "marker": new_token(), "now": now} for group in names]
        self._run(self._move_markers_sql(self.postgresql), rows)

    @staticmethod
    @functools.cache
    def _group_rows_sql(postgresql: bool) -> Select[Any]:
        """(name, marker, levels, *in force per dimension) of the groups given."""
        return select(QuotaGroup.name, QuotaGroup.marker, QuotaGroup.levels, *_IN_FORCE).where(
            among(postgresql, QuotaGroup.name, "groups")
        )

    def group_rows(self, groups: list[str]) -> dict[str, GroupRow]:
        """Each group's marker, summary (its JSON, None if never summarized) and sums in
        force; a group that has no row is left out."""
        shared = self.shared
        known = {} if shared is None else shared.groups
        found = {group: row for group in groups if (row := known.get(group)) is not None}
        unknown = [group for group in groups if group not in found] if found else groups
        if unknown:
            statement = self._group_rows_sql(self.postgresql)
            read = {
                row[0]: GroupRow(row[1], row[2], tuple(row[3:]))
                for row in self._run(statement, {"groups": unknown}).all()
            }
            found.update(read)
            if shared is not None:
                known.update((group, row) for group, row in read.items() if group in shared.locked)
        return found

    @staticmethod
    @functools.cache
    def _markers_sql(postgresql: bool) -> Select[str, int]:
        """(name, marker) of the groups given."""
        return select(QuotaGroup.name, QuotaGroup.marker).where(
            among(postgresql, QuotaGroup.name, "groups")
        )

    def markers(self, groups: Sequence[str]) -> dict[str, int]:
        """Each group's marker now; a group that has no row is left out."""
        statement = self._markers_sql(self.postgresql)
        return dict(self._run(statement, {"groups": list(groups)}).all())

    @staticmethod
    @functools.cache
    def _wakes_sql(postgresql: bool) -> Select[str, int]:
        """(name, wake) of the groups given."""
        return select(QuotaGroup.name, QuotaGroup.wake).where(
            among(postgresql, QuotaGroup.name, "groups")
        )

    def wakes(self, groups: Sequence[str]) -> dict[str, int]:
        """Each group's wake (`app.quota.leases`); a group that has no row is left out."""
        statement = self._wakes_sql(self.postgresql)
        return dict(self._run(statement, {"groups": list(groups)}).all())

    @staticmethod
    @functools.cache
    def _save_group_sql() -> Update:
        """SQLite's: a group's summary, sums in force and wake."""
        # ("group_name": an UPDATE reserves column names for its SET.)
        return (
            update(QuotaGroup)
            .where(QuotaGroup.name == bindparam("group_name"))
            .values(
                levels=bindparam("group_levels"),
                wake=QuotaGroup.wake + bindparam("woken"),
                **{column.key: bindparam(f"set_{column.key}") for column in _IN_FORCE},
            )
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

    @staticmethod
    @functools.cache
    def _save_groups_arrays_sql() -> TextClause:
        """PostgreSQL's: `_save_groups_arrays`, in one statement over arrays."""
        return text(GroupQueries._save_groups_arrays())

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
        if self.postgresql:
            return self._store_groups(self._save_groups_arrays_sql(), groups, moved, now, {})
        rows = []
        for group, levels, in_force, woken in groups:
            parameters: dict[str, Any] = {
                "group_name": group,
                "group_levels": levels,
                "woken": int(woken),
            }
            parameters.update(zip(_SET_IN_FORCE, in_force, strict=True))
            rows.append(parameters)
        self._run(self._save_group_sql(), rows)
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
        """Run ``statement`` (one that stores the groups as `_save_groups_arrays` does) with
        ``parameters`` and the groups' own, those among ``moving`` given new markers;
        remember the groups' rows as stored. Returns the groups given markers."""
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
        for name, values in zip(_SET_IN_FORCE, zip(*sums, strict=True), strict=True):
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

    @staticmethod
    @functools.cache
    def _in_force_sql(postgresql: bool) -> Select[Any]:
        """(name, *in force per dimension) of the groups given."""
        return select(QuotaGroup.name, *_IN_FORCE).where(
            among(postgresql, QuotaGroup.name, "groups")
        )

    @staticmethod
    @functools.cache
    def _take_in_force_sql() -> Update:
        """A group's sums in force once rows left it, and its wake moved if they woke it."""
        return (
            update(QuotaGroup)
            .where(QuotaGroup.name == bindparam("group_name"))
            .values(
                wake=QuotaGroup.wake + bindparam("woken"),
                **{column.key: bindparam(f"set_{column.key}") for column in _IN_FORCE},
            )
        )

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
        reading = self._in_force_sql(self.postgresql)
        for name, *in_force in self._run(reading, {"groups": names}).all():
            after, woken = take(in_force, leaving[name])
            parameters: dict[str, Any] = {"group_name": name, "woken": int(woken)}
            parameters.update(zip(_SET_IN_FORCE, after, strict=True))
            rows.append(parameters)
        if rows:
            self._run(self._take_in_force_sql(), rows)

    @staticmethod
    @functools.cache
    def _lock_groups_sql(postgresql: bool) -> TextClause:
        """On PostgreSQL, the locks that order the reports of a group (see `app.quota.store`):
        each group's marker row, made if missing, locked to the end of the transaction, all
        of a report's in one statement in one order, so that no two reports wait on each
        other in a cycle. Row locks live in the rows, not in the server's lock table, which
        a report of thousands of groups would exhaust. (An ON CONFLICT whose update never
        applies still locks the row it found.) On SQLite, whose writers are serialized
        already, the rows are only made."""
        if postgresql:
            return text(
                "INSERT INTO quota_groups (name, marker, changed_at) "
                "SELECT g, floor(random() * 9.2e18)::bigint, :now "
                "FROM unnest(CAST(:groups AS VARCHAR[])) AS g ORDER BY g "
                "ON CONFLICT (name) DO UPDATE SET marker = quota_groups.marker WHERE false "
                "RETURNING name"
            )
        return text(
            "INSERT INTO quota_groups (name, marker, changed_at) "
            "SELECT value, abs(random()), :now FROM json_each(:groups) WHERE true "
            "ON CONFLICT (name) DO NOTHING"
        ).bindparams(bindparam("now", type_=QuotaGroup.__table__.c.changed_at.type))

    def lock(self, groups: Iterable[str], now: datetime) -> None:
        """Hold the groups (their plans and markers) until this transaction ends; see
        `app.quota.store`. All in one statement: a report takes no group's lock after.
        (Groups that an earlier report of the transaction locked are held already.)"""
        names = sorted(set(groups) - (self.shared.locked if self.shared is not None else set()))
        if not names:
            return
        statement = self._lock_groups_sql(self.postgresql)
        if self.postgresql:
            # The groups given rows, with new markers (the others were there already).
            if self._run(statement, {"groups": names, "now": now}).all():
                self._markers_move()
        else:
            self._markers_move()  # a group without a row gets one, with a new marker
            self._run(statement, {"groups": json.dumps(names), "now": now})
        if self.shared is not None:
            self.shared.locked.update(names)
