"""What the quota bound rests on, checked in a snapshot of the store (`rgadmin check`): each
group's sums in force equal the allocations of the rows counted in it, where a grant reads
them; no row counted belongs to a reporter gone more than `GONE_AFTER_INTERVALS` report
intervals; every attachment names a group. The rows, read by `app.quota.snapshot`, are judged
here with no database. Why: docs/design.md ("The invariant").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from app.models import DIMENSION_COLUMNS

__all__ = [
    "ABSOLUTE_TOLERANCE",
    "GONE_AFTER_INTERVALS",
    "RELATIVE_TOLERANCE",
    "Attachment",
    "CountedRow",
    "GroupInForce",
    "Snapshot",
    "Violation",
    "find_violations",
]

RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE = 1e-6
GONE_AFTER_INTERVALS = 2
"""Report intervals past a reporter's ``lease_until`` after which a row of it still counted
is a violation (rule 2): a reporter gone a moment ago is still counted in a healthy store
until a server process next looks for silent ones."""


class GroupInForce(NamedTuple):
    """A ``quota_groups`` row, per dimension: its sums in force, the group's limits (None
    where it limits nothing, or where the group no longer exists), and the limits its
    stored summary was made for (all None without one)."""

    name: str
    in_force: tuple[float, ...]
    limits: tuple[float | None, ...]
    summarized: tuple[float | None, ...]


class CountedRow(NamedTuple):
    """A ``quota_usage`` row counted in a group, with its reporter's ``lease_until`` (None
    when the reporter has no row, which only a store restored by hand can have)."""

    group: str
    reporter_id: str
    tenant: str
    namespace: str
    allocations: tuple[float | None, ...]
    lease_until: datetime | None


class Attachment(NamedTuple):
    """What names a group: ``kind`` is "namespace", "tenant" or "default"."""

    kind: str
    holder: str
    group: str


@dataclass(frozen=True)
class Snapshot:
    """What the check reads of a store, in one transaction, at ``read_at``."""

    read_at: datetime
    groups: Sequence[GroupInForce]
    counted: Sequence[CountedRow]
    attachments: Sequence[Attachment]
    group_names: frozenset[str]


@dataclass(frozen=True)
class Violation:
    """One thing off, about ``subject`` (a group, a tenant, a namespace)."""

    subject: str
    problem: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem}"


def find_violations(snapshot: Snapshot, report_interval_s: float) -> list[Violation]:
    """Every violation of the three rules above, groups in name order, one per group and
    dimension, per group and reporter, and per attachment.

    A reporter is gone when its ``lease_until`` is more than `GONE_AFTER_INTERVALS` report
    intervals before ``snapshot.read_at``.
    """
    gone_before = snapshot.read_at - timedelta(seconds=GONE_AFTER_INTERVALS * report_interval_s)
    return [
        *_sums_off(snapshot.groups, snapshot.counted),
        *_gone_counted(snapshot.counted, gone_before, snapshot.read_at),
        *_dangling(snapshot.attachments, snapshot.group_names),
    ]


def _sums_off(groups: Sequence[GroupInForce], counted: Sequence[CountedRow]) -> list[Violation]:
    allocations: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in DIMENSION_COLUMNS])
    for row in counted:
        for summed, allocation in zip(allocations[row.group], row.allocations, strict=True):
            summed.append(allocation or 0.0)
    found: list[Violation] = []
    for group in sorted(groups, key=lambda group: group.name):
        rows = allocations.get(group.name) or [[] for _ in DIMENSION_COLUMNS]
        for column, in_force, limit, summarized, summed in zip(
            DIMENSION_COLUMNS, group.in_force, group.limits, group.summarized, rows, strict=True
        ):
            if limit is None or summarized != limit:
                continue  # not read before it is counted again (rule 1)
            expected = math.fsum(summed)
            if not _close(in_force, expected, limit):
                found.append(
                    Violation(
                        f"group {group.name}",
                        f"{column}_in_force is {in_force!r}, expected {expected!r} "
                        f"(the allocations of the {len(summed)} rows counted in it)",
                    )
                )
    return found


def _close(found: float, expected: float, limit: float) -> bool:
    """Equal but for floating point: the sums in force move by each grant's change, so
    they drift from the exact sum by a few units in the last place of the rates they
    added and took away, which the group's limit bounds."""
    scale = max(abs(found), abs(expected), limit)
    return abs(found - expected) <= RELATIVE_TOLERANCE * scale + ABSOLUTE_TOLERANCE


def _gone_counted(
    counted: Sequence[CountedRow], gone_before: datetime, read_at: datetime
) -> list[Violation]:
    gone: dict[tuple[str, str], list[CountedRow]] = defaultdict(list)
    for row in counted:
        if row.lease_until is None or row.lease_until < gone_before:
            gone[row.group, row.reporter_id].append(row)
    found = []
    for (group, reporter_id), rows in sorted(gone.items()):
        lease_until = rows[0].lease_until
        namespaces = ", ".join(sorted(f"{row.tenant}/{row.namespace}" for row in rows)[:3])
        if lease_until is None:
            why = "which has no quota_reporters row"
        else:
            ago = (read_at - lease_until).total_seconds()
            why = f"whose lease ran out at {lease_until.isoformat()} ({ago:.0f} s ago)"
        found.append(
            Violation(
                f"group {group}",
                f"{len(rows)} rows ({namespaces}{', ...' if len(rows) > 3 else ''}) of "
                f"reporter {reporter_id}, {why}, are counted in it, expected none",
            )
        )
    return found


def _dangling(attachments: Sequence[Attachment], group_names: frozenset[str]) -> list[Violation]:
    return [
        Violation(
            "default resource group" if kind == "default" else f"{kind} {holder}",
            f"attached to group {group}, which does not exist (expected a resource_groups row)",
        )
        for kind, holder, group in sorted(attachments)
        if group not in group_names
    ]
