"""What every part of `UsageRepository` works on: its connection, its dialect, and what the
reports stored in one transaction share."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.orm import SessionTransaction


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


class Queries:
    """The connection a part of `UsageRepository` runs its statements on (a report's
    transaction), whether it is PostgreSQL's, and what the transaction's reports share."""

    __slots__ = ()

    connection: Connection
    postgresql: bool
    shared: _Shared | None

    def _run(self, statement: Any, parameters: Any = None) -> Any:
        return self.connection.execute(statement, parameters)

    @property
    def moved(self) -> bool:
        """Whether this transaction may have moved markers."""
        return self.shared is not None and self.shared.moved

    def _markers_move(self) -> None:
        """This transaction may move markers: a look at them made before no longer holds."""
        if self.shared is not None:
            self.shared.moved = True

    def _forget_groups(self, groups: Iterable[str] | None) -> None:
        """The rows of those groups (of all, if None) are changed: read them again."""
        if self.shared is None:
            return
        if groups is None:
            self.shared.groups.clear()
            return
        for group in groups:
            self.shared.groups.pop(group, None)
