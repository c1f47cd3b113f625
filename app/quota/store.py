"""Usage reports in the SQL store, so that every server process sees every reporter: `submit`
resolves a report's groups, claims its reporter alive, records the figures that moved, plans
the groups whose marker moved under their lock through `app.quota.planner`, and answers with
every namespace's grants; the process remembers the rest (`app.quota.cache`), and
`app.quota.reporters` says who may report. Why: docs/design.md ("The bound under concurrency").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.access import Principal
from app.db import after_commit
from app.errors import NotFound
from app.metrics import GroupStats, GroupTotals
from app.quota import answers, planner
from app.quota.cache import Answer, LastAnswer, Plan, ReportCache, ReporterState, Row
from app.quota.counts import UsageCounter
from app.quota.effective import Effective, EffectiveRows, parse_namespace
from app.quota.figures import (
    enforced_rates,
    figures_of,
    held_ranges,
    held_still,
    moved_since,
    released,
    reported_figures,
)
from app.quota.leases import full_look_s, lease_s, lease_until
from app.quota.levels import GroupSummary, Previous
from app.quota.reporters import authorize_reporting, claim_reporter, limit_reporters
from app.quota.repository import Claim, Claimed, Saved, UsageRepository, Written
from app.quota.schemas import (
    NamespaceUsage,
    UsageReport,
)
from app.quota.tokens import new_token, new_tokens
from app.quota.tuning import (
    EARLY_REPORT,
    FEW_GROUPS,
    FEW_MARKERS,
    LATE_COMMIT_S,
    STALE_REPORT_INTERVALS,
)
from app.quota.types import ALLOCATIONS, Figures, NamespaceKey, Rates
from rgspark.wire import ALLOCATION_CHANGE, DIMENSIONS, moved

__all__ = [
    "Claim",
    "Claimed",
    "Effective",
    "claim",
    "claim_all",
    "effective_groups",
    "parse_namespace",
    "submit",
]

_ALL_UNLIMITED: Rates = (None,) * len(DIMENSIONS)
_ALLOCATION_AT = frozenset(ALLOCATIONS)


def _missing(keys: Iterable[NamespaceKey], found: dict[NamespaceKey, Effective]) -> None:
    for key in keys:
        if key not in found:
            raise NotFound(f"Namespace does not exist: {key[0]}/{key[1]}")


def effective_groups(
    session: Session, keys: Iterable[NamespaceKey], cache: ReportCache | None = None
) -> dict[NamespaceKey, Effective]:
    """Each namespace's effective group and its limits; NotFound names a missing namespace."""
    queries = UsageRepository.of(session)
    generation = None if cache is None else queries.generation()
    return _effective(queries, list(keys), cache, generation)


def _effective(
    queries: UsageRepository,
    keys: list[NamespaceKey],
    cache: ReportCache | None,
    generation: int | None,
) -> dict[NamespaceKey, Effective]:
    """`effective_groups`, remembered under the admin generation (read before, so that a
    write committed after it can only make the cache forget too early, never keep what it
    changed)."""
    found = {} if cache is None else cache.effective(generation, keys)
    if len(found) == len(keys):
        return found
    unknown = [key for key in keys if key not in found] if found else keys
    rows = EffectiveRows()
    read = {(row[0], row[1]): rows.of(row[2], row[3:]) for row in queries.effective(unknown)}
    _missing(unknown, read)
    if cache is not None:
        cache.remember_effective(generation, read)
    found.update(read)
    return found


@dataclass(slots=True)
class _Entry:
    """One namespace of the report being handled."""

    key: NamespaceKey
    ref: str
    effective: Effective
    row: Row | None
    """As stored before this report."""
    figures: Figures
    """What the row holds after this report: the reported figures if they moved, else the
    stored ones; allocations as in force, then as granted."""
    changed: bool
    """Whether something the allocator reads for its group changes with this report."""
    write: bool
    """Whether the row is written (if the report is accepted)."""
    planned: int | None
    """The marker of the group's plan that the grants come from."""
    enforced: Rates
    """What the reporter says it enforces, per dimension (`enforced_rates`): where it says,
    a fall is counted in force at the old rate until it has applied the new one."""


def _look_up(
    queries: UsageRepository, names: list[str], cache: ReportCache, generation: int
) -> tuple[dict[NamespaceKey, str], dict[NamespaceKey, Effective]]:
    """A report's namespaces by key, with their effective groups."""
    refs = {parse_namespace(ref): ref for ref in names}
    return refs, _effective(queries, list(refs), cache, generation)


def _accepted(report: UsageReport, now: float, interval_s: float) -> bool:
    """Whether the report is recent enough to be stored (not only answered)."""
    return now - report.sentAtMs / 1000 <= STALE_REPORT_INTERVALS * interval_s


def claim(
    serving: Serving,
    *,
    principal: Principal,
    reporter_id: str,
    report: UsageReport,
    now: float,
    pace_s: float = 0.0,
) -> Claim | None:
    """What `submit`, given the same arguments, claims of its reporter before anything
    else (None for a report too old to be stored, which claims nothing): so that the reports
    that a lane stores together claim theirs in one statement (`claim_all`)."""
    interval_s = serving.interval_s
    if not _accepted(report, now, interval_s):
        return None
    # Alive until the lease this process last gave it runs out, or this answer's pace if
    # longer (a paced answer holds as long): a guess that holds in a steady state and while
    # paced; `submit` moves it if its answer gives another.
    guessed = max(serving.cache.lease(reporter_id) or interval_s, pace_s)
    until = lease_until(datetime.fromtimestamp(now, UTC), guessed, interval_s)
    return Claim(reporter_id, principal.role, until)


def claim_all(session: Session, claims: Sequence[Claim]) -> dict[str, Claimed]:
    """Claim the reporters of reports about to be stored in this transaction, in one
    statement, in one order; returns what each reporter was claimed as, for the first of
    its reports to take (`submit`'s ``ahead``)."""
    return UsageRepository.of(session).claim_all(claims)


@dataclass(frozen=True, slots=True)
class Serving:
    """How this server process handles reports, and what it tells of them: the same for
    every report."""

    interval_s: float
    max_lease_s: float
    """A steady reporter's lease (`app.quota.leases`)."""
    cache: ReportCache
    stats: GroupStats | None = None
    """The metrics: learn each group's totals as a plan of it saw them."""
    counter: UsageCounter | None = None
    """Counts the units each group used, once stored (`app.quota.counts`)."""
    max_reporters: int | None = None
    """A role's live reporters per namespace, at most (`limit_reporters`)."""


@dataclass(slots=True)
class _Handled:
    """A report being handled: what it claimed, and what the process knows of its
    reporter."""

    queries: UsageRepository
    principal: Principal
    reporter_id: str
    report: UsageReport
    now: float
    pace_s: float
    claimed: Claim | None
    """Its reporter's claim; None when the report is too old to be stored."""
    token: int | None
    generation: int
    keys: list[NamespaceKey]
    # What the process knows (`_recall`):
    repeated: LastAnswer | None = None
    """The last answer, if it was about the same namespaces under the same generation."""
    looked_up: tuple[dict[NamespaceKey, str], dict[NamespaceKey, Effective]] | None = None
    """Its namespaces by key, with their effective groups: looked up only for a report that
    was not about the same namespaces as the last answer (a steady one needs none)."""
    known: ReporterState | None = None
    rows: dict[NamespaceKey, Row] = field(default_factory=dict)
    markers: dict[str, int] = field(default_factory=dict)
    """The reporter's groups whose markers moved since it planned them."""
    full_check_at: float = 0.0
    moment: datetime = field(init=False)
    """``now`` as a datetime, for the statements."""

    def __post_init__(self) -> None:
        self.moment = datetime.fromtimestamp(self.now, UTC)

    @property
    def covered_s(self) -> float:
        return self.report.intervalMs / 1000


@dataclass(slots=True)
class _Planned:
    """What a report that was not steady planned: the reporter's state, its namespaces,
    those it no longer reports, and the groups to store."""

    state: ReporterState
    entries: list[_Entry]
    dropped: list[NamespaceKey]
    saved: list[Saved]


def submit(
    session: Session,
    serving: Serving,
    *,
    principal: Principal,
    reporter_id: str,
    report: UsageReport,
    now: float,
    claim: Claim | None,
    ahead: Claimed | None = None,
    pace_s: float = 0.0,
) -> bytes:
    """Store a report (unless it is too old) and answer with the reporter's allocations:
    the JSON of a `ReportResult`. In named steps: **claim** the reporter and check its
    rights; **recall** what the process knows of it and which of its groups moved; if
    nothing changed, the report is **steady** and skips to the answer; else **plan** the
    groups whose inputs changed, under their locks, settling each namespace's grants into
    its row; **store** the rows due; answer, **leased** (`app.quota.leases`): a steady
    reporter's answer holds for ``max_lease_s``, a settling one's for an interval; either
    asks for no report sooner than ``pace_s``, and holds as long (`app.quota.pacing`).

    ``claim`` is what the report claims of its reporter (`claim`, given the same
    ``pace_s``); ``ahead``, what its batch's statement answered for it, if that claimed it
    (`claim_all`).
    """
    handled = _claim(session, serving, principal, reporter_id, report, now, pace_s, claim, ahead)
    _recall(handled, serving)
    steady = _steady(handled)
    if steady and handled.known is not None:
        state = replace(handled.known)  # shares its rows, plans and answers, as they stay
        state.checked_at, state.full_check_at = now, handled.full_check_at
        planned = _Planned(state, [], [], [])
    else:
        planned = _plan_report(handled, serving)
    if handled.claimed is not None:
        _store(session, handled, planned, serving, steady=steady)
    if steady and handled.repeated is not None:
        answered = handled.repeated  # nothing an answer comes from changed
    else:
        answered = _answer(planned.state, planned.entries, handled.generation)
    return _leased(session, handled, planned, answered, serving)


def _claim(
    session: Session,
    serving: Serving,
    principal: Principal,
    reporter_id: str,
    report: UsageReport,
    now: float,
    pace_s: float,
    claimed: Claim | None,
    ahead: Claimed | None,
) -> _Handled:
    """Claim the reporter (its lease), and check that its role may report for every
    namespace it names."""
    # The claim reads the admin generation too, before anything it guards is read (and, an
    # accepted report being soft state, has its commit not wait for the disk: see
    # `UsageRepository.claim`).
    token, generation = claim_reporter(session, principal, reporter_id, ahead or claimed)
    # Rights before existence: a namespace the role may not report for is a 403 whether it
    # exists or not. Rights are admin state: known once under the generation.
    keys = [parse_namespace(name) for name in report.namespaces]
    cache = serving.cache
    if not cache.authorized(generation, principal.role, keys):
        authorize_reporting(session, principal, keys)
        cache.remember_authorized(generation, principal.role, keys)
    queries = UsageRepository.of(session)
    return _Handled(
        queries, principal, reporter_id, report, now, pace_s, claimed, token, generation, keys
    )


def _recall(handled: _Handled, serving: Serving) -> None:
    """What the process knows of the reporter, and which of its groups moved since."""
    cache, interval_s, queries = serving.cache, serving.interval_s, handled.queries
    names = list(handled.report.namespaces)
    # Namespaces that this process last answered the reporter about under the same admin
    # generation exist, in the groups answered.
    handled.repeated = repeated = cache.last_answer(handled.reporter_id, handled.generation, names)
    if repeated is None:
        handled.looked_up = _look_up(queries, names, cache, handled.generation)
    handled.known = known = cache.reporter(handled.reporter_id, handled.token)
    handled.rows = known.rows if known is not None else queries.rows(handled.reporter_id)
    full_look = full_look_s(interval_s, serving.max_lease_s)
    handled.markers, handled.full_check_at = _moved_markers(
        queries, handled.reporter_id, known, cache, handled.now, interval_s, full_look
    )


def _steady(handled: _Handled) -> bool:
    """Whether nothing changed: the same namespaces in the same groups, plans whose inputs
    did not change and that wait for nothing (`_stale`), figures within 5% of those
    stored. Then nothing is planned, written or built anew."""
    repeated, known = handled.repeated, handled.known
    return (
        repeated is not None
        and known is not None
        and known.last is repeated
        and not repeated.early
        and not known.releasing
        and not handled.markers
        and held_still(repeated.held, figures_of(handled.report), handled.covered_s)
    )


def _plan_report(handled: _Handled, serving: Serving) -> _Planned:
    """Plan the groups whose inputs changed, under their locks, and settle each
    namespace's grants into its row."""
    queries, known, rows = handled.queries, handled.known, handled.rows
    state = ReporterState(
        token=handled.token or 0,
        rows=rows,
        plans=dict(known.plans) if known is not None else {},
        answers=dict(known.answers) if known is not None else {},
        checked_at=handled.now,
        full_check_at=handled.full_check_at,
    )
    entries, dropped = _entries(handled, state.plans, serving)
    # Until this report commits, no other report plans or marks any group it may plan or
    # mark: each reads the others' allocations in force as they are after every earlier
    # grant (see the module's docstring).
    queries.lock(_groups_touched(entries, rows), handled.moment)
    groups: dict[str, list[_Entry]] = defaultdict(list)
    for entry in entries:
        if entry.effective.group is not None and entry.effective.limited:
            groups[entry.effective.group].append(entry)
    saved: list[Saved] = []
    replanned = _plan(handled, state.plans, groups, serving.stats, saved)
    _settle(entries, state.plans, replanned)
    state.releasing = any(plan.counted for plan in state.plans.values())
    return _Planned(state, entries, dropped, saved)


def _entries(
    handled: _Handled, plans: Mapping[str, Plan], serving: Serving
) -> tuple[list[_Entry], list[NamespaceKey]]:
    """The report's namespaces as it reports them now, and those it no longer reports; a
    role that would have too many live reporters in a namespace it joins is refused."""
    rows, report = handled.rows, handled.report
    refs, effective = handled.looked_up or _look_up(
        handled.queries, list(report.namespaces), serving.cache, handled.generation
    )
    entries = [
        _entry(
            key,
            ref,
            effective[key],
            rows.get(key),
            report.namespaces[ref],
            handled.covered_s,
            _fair(plans, effective[key], key),
        )
        for key, ref in refs.items()
    ]
    dropped = [key for key in rows if key not in refs]
    joined = [entry.key for entry in entries if entry.row is None]
    if joined and handled.claimed is not None and serving.max_reporters is not None:
        limit_reporters(
            handled.queries,
            handled.principal,
            handled.reporter_id,
            joined,
            handled.moment,
            serving.max_reporters,
        )
    return entries, dropped


def _store(
    session: Session, handled: _Handled, planned: _Planned, serving: Serving, *, steady: bool
) -> None:
    """Write the rows due and the groups planned; count the units used, once committed."""
    queries, rows, state, entries = handled.queries, handled.rows, planned.state, planned.entries
    dropped = [(key, rows[key]) for key in planned.dropped]
    written = _write(queries, handled.reporter_id, entries, dropped, planned.saved, handled.moment)
    if written is not None:
        state.token = written
        state.rows = {
            entry.key: Row(entry.figures, entry.effective.group, entry.planned)
            if entry.write
            else rows[entry.key]
            for entry in entries
        }
    counter = serving.counter
    if counter is not None:
        members = state.rows if steady else {e.key: e.effective.group for e in entries}
        used = _used_by_group(handled.report, handled.keys, members)
        now, covered_s = handled.now, handled.covered_s
        after_commit(session, lambda: counter.add(used, now, covered_s))
    if queries.moved:
        # Markers it moved are news to the process's shared looks at them, once committed.
        after_commit(session, serving.cache.forget_markers)


def _leased(
    session: Session,
    handled: _Handled,
    planned: _Planned,
    answered: LastAnswer,
    serving: Serving,
) -> bytes:
    """The answer, with its lease: the reporter's claim moved to it, and the process's
    memory of the reporter kept once committed."""
    state, interval_s, now = planned.state, serving.interval_s, handled.now
    state.last = answered
    accepted = handled.claimed is not None
    # A reporter that changed nothing its groups' plans read, and waits for nothing, holds
    # its answer for a lease: whatever moves its share from now on is pushed to it.
    quiet = not planned.dropped and not any(entry.changed for entry in planned.entries)
    leased = lease_s(
        steady=accepted and quiet and not answered.early,
        interval_s=interval_s,
        max_lease_s=serving.max_lease_s,
    )
    state.lease_s, state.pace_s = leased, handled.pace_s
    held = max(leased, handled.pace_s)
    if handled.claimed is not None and handled.token is not None:
        until = lease_until(handled.moment, held, interval_s)
        if until != handled.claimed.until:  # not the lease guessed
            handled.queries.extend(handled.reporter_id, until)
        # Remembered once committed: a rolled-back report must not be taken for stored.
        cache, reporter_id = serving.cache, handled.reporter_id
        after_commit(session, lambda: cache.remember(reporter_id, state))
    stats = serving.stats
    if stats is not None and now - state.observed_at >= interval_s:
        # Groups not planned again have the totals last recorded: marked current once an
        # interval, so that the metrics do not take them for silent.
        stats.touch(state.plans)
        state.observed_at = now
    return _result(answered, accepted, interval_s, held, handled.pace_s)


def _used_by_group(
    report: UsageReport,
    keys: list[NamespaceKey],
    members: Mapping[NamespaceKey, Row] | Mapping[NamespaceKey, str | None],
) -> dict[str, list[float]]:
    """The units the report says were used, per effective group and dimension (``members``:
    each namespace's group, or its row, which holds it)."""
    used: dict[str, list[float]] = {}
    # Spelt out in `DIMENSIONS`' order rather than looped over: a broker's report names
    # thousands of namespaces, and this runs at each of its steady reports.
    for key, usage in zip(keys, report.namespaces.values(), strict=True):
        member = members.get(key)
        group = member.group if isinstance(member, Row) else member
        if group is None:
            continue
        a, b = usage.get("publishMsgs"), usage.get("publishBytes")
        c, d = usage.get("dispatchMsgs"), usage.get("dispatchBytes")
        units: list[float] = [
            0 if a is None else a["used"],
            0 if b is None else b["used"],
            0 if c is None else c["used"],
            0 if d is None else d["used"],
        ]
        summed = used.get(group)
        if summed is None:
            used[group] = units
        else:
            for index, amount in enumerate(units):
                summed[index] += amount
    return used


def _groups_touched(entries: list[_Entry], rows: dict[NamespaceKey, Row]) -> set[str]:
    """Every group a report may plan or mark: its namespaces' groups now and as stored."""
    touched = {entry.effective.group for entry in entries}
    touched.update(row.group for row in rows.values())
    touched.discard(None)
    return touched  # type: ignore[return-value]


def _result(
    answered: LastAnswer, accepted: bool, interval_s: float, lease: float, pace_s: float
) -> bytes:
    """The JSON of the `ReportResult`: its head, then the namespaces as answered."""
    next_report_s = max(interval_s * EARLY_REPORT, pace_s) if answered.early else lease
    return answers.result(
        answered.namespaces,
        accepted=accepted,
        report_interval_ms=max(1, round(next_report_s * 1000)),
        report_period_ms=max(1, round(interval_s * 1000)),
        lease_ms=max(1, round(lease * 1000)),
    )


def _moved_markers(
    queries: UsageRepository,
    reporter_id: str,
    known: ReporterState | None,
    cache: ReportCache,
    now: float,
    interval_s: float,
    full_look: float,
) -> tuple[dict[str, int], float]:
    """The reporter's groups whose markers moved since it planned them, with their markers
    now; and when the last full look was.

    Read before the peers (in `_plan`), so that a change committed in between makes the next
    report plan again, never one too few. A reporter that plans `FEW_GROUPS` or fewer (a
    Spark worker plans one) reads their markers as they are, whenever their changes were
    made and committed: a full look at every report, at the cost of one small read (a
    paced worker's look at the markers changed since its last report, seconds before, cost
    its lane as much, and its full looks more). Of a reporter of more groups, a full look
    has the database compare every row of the reporter with its group's marker; in
    between, a look at the markers changed since the last one (none at all in a steady
    state) will do, unless more of them changed than the reporter has rows. That one looks
    `LATE_COMMIT_S` further back (an interval at most), for changes that committed later
    than they were made; one that took longer still is found by the next full look,
    ``full_look`` seconds on (`app.quota.leases.full_look_s`). The process's reports share
    the markers read by name for `app.quota.tuning.MARKER_LOOK_S`: a report served by a read
    is one that came that much earlier, and what it missed, its next finds.
    """
    if known is not None and len(known.plans) <= FEW_GROUPS:
        return _markers_now(queries, known, cache, now), now
    if known is not None and now - known.full_check_at < full_look:
        moved = _markers_changed(queries, known, interval_s)
        if moved is not None:
            return moved, known.full_check_at
    # Rows store the marker they were last written under; a plan kept since (`_plan`)
    # has a newer one, which is what tells whether the group moved since.
    stale = queries.stale(reporter_id)
    if known is not None and stale:
        stale = _moved_since_planned(known.plans, stale.items())
    return stale, now


def _moved_since_planned(
    plans: Mapping[str, Plan], markers: Iterable[tuple[str, int]]
) -> dict[str, int]:
    """The groups among ``markers`` (group, marker now) whose marker is not that of the
    reporter's plan of them, or that it has no plan of."""
    return {
        name: marker
        for name, marker in markers
        if (plan := plans.get(name)) is None or plan.marker != marker
    }


def _markers_now(
    queries: UsageRepository, known: ReporterState, cache: ReportCache, now: float
) -> dict[str, int]:
    """The reporter's planned groups whose markers moved, read as they are now."""
    groups = list(known.plans)
    if not groups:
        return {}
    current = None if queries.moved else cache.markers_read(now, groups)
    if current is None:
        current = queries.markers(groups)
        if not queries.moved:  # else the transaction's own moves are not committed yet
            cache.remember_markers_read(now, groups, current)
    return _moved_since_planned(known.plans, current.items())


def _markers_changed(
    queries: UsageRepository, known: ReporterState, interval_s: float
) -> dict[str, int] | None:
    """The reporter's planned groups whose markers moved, from the markers changed since
    its last look; None if more changed than it has rows (then it compares them all)."""
    since = datetime.fromtimestamp(known.checked_at - min(LATE_COMMIT_S, interval_s), UTC)
    # Limited and in index order, so that the database reads only what changed even when
    # its statistics are too old to tell it how little that is.
    limit = max(len(known.rows), FEW_MARKERS)
    changed = queries.changed_markers(since, limit + 1)
    if len(changed) > limit:
        return None
    plans = known.plans  # groups it has no plan of are not its business here
    return {
        name: marker
        for name, marker in changed
        if (plan := plans.get(name)) is not None and plan.marker != marker
    }


def _fair(plans: Mapping[str, Plan], effective: Effective, key: NamespaceKey) -> Rates | None:
    """A namespace's fair shares as its group was last planned, None where its group does
    not limit a dimension (`app.quota.figures.demand_range`); None if not known."""
    if effective.group is None or not effective.limited:
        return _ALL_UNLIMITED
    plan = plans.get(effective.group)
    if plan is None or plan.quotas != effective.quotas:
        return None
    return plan.fallbacks.get(key)


def _entry(
    key: NamespaceKey,
    ref: str,
    effective: Effective,
    row: Row | None,
    usage: NamespaceUsage,
    covered_s: float,
    fair: Rates | None,
) -> _Entry:
    enforced = enforced_rates(usage)
    if row is None:
        reported = reported_figures(usage, covered_s, None)
        return _Entry(key, ref, effective, row, reported, True, True, None, enforced)
    if moved_since(row.figures, usage, covered_s, fair):
        figures, changed = reported_figures(usage, covered_s, row.figures), True
    else:
        # Held: the allocator goes on seeing what it saw. A move to another group changes
        # both groups' members.
        figures, changed = row.figures, row.group != effective.group
    # A fall granted before, applied since: the room it frees is the others' from now on.
    lowered = released(figures, enforced)
    if lowered is not None:
        figures, changed = lowered, True
    return _Entry(key, ref, effective, row, figures, changed, changed, row.planned, enforced)


def namespace_of(key: NamespaceKey) -> str:
    return f"{key[0]}/{key[1]}"


def _plan(
    handled: _Handled,
    plans: dict[str, Plan],
    groups: dict[str, list[_Entry]],
    stats: GroupStats | None,
    saved: list[Saved],
) -> set[str]:
    """Plan again each group whose inputs changed since the reporter's last plan of it
    (its marker moved, `_Handled.markers`, or `_stale`); returns those groups.

    Each group's ledger (its summary and sums in force) is read (`_ledgers`), the planner
    grants from it (`app.quota.planner.plan`), and what it returns is added to ``saved``,
    which `_write` stores with the report's rows (if the report is accepted). A plan that
    grants what is in force already, from a summary made at the marker now, stores nothing:
    neither the group's row nor the reporter's; it is remembered under the new marker
    (`_moved_markers` compares markers with it).

    A paced reporter (`app.quota.pacing`) wakes nobody: paced workers learn their shares
    at their pace, and waking them all at once would bring back the load the pace keeps
    off.
    """
    for group in [group for group in plans if group not in groups]:
        del plans[group]
    stale = [
        group
        for group, entries in groups.items()
        if group in handled.markers or _stale(plans.get(group), entries)
    ]
    if not stale:
        return set()
    members = {group: [_member(entry, group) for entry in groups[group]] for group in stale}
    ledgers = _ledgers(handled, groups, members)
    markers, paced = handled.markers, handled.pace_s > 0
    plan_ids = iter(new_tokens(len(stale)))
    unchanged: set[str] = set()
    for group in stale:
        ledger = ledgers[group]
        planned = planner.plan(ledger.summary, ledger.in_force, members[group], paced=paced)
        if ledger.keepable and planned.unchanged:
            unchanged.add(group)
        else:
            summary = ledger.summary.to_json(planned.shortfalls)
            saved.append((group, summary, planned.in_force, ledger.woken and not paced))
        plans[group] = _kept(next(plan_ids), markers.get(group, 0), groups[group], planned)
        if stats is not None:
            stats.record(group, *_totals(ledger.summary, planned.in_force))
    return set(stale) - unchanged


@dataclass(frozen=True, slots=True)
class _Ledger:
    """A group as a report plans it: its summary and sums in force."""

    summary: GroupSummary
    in_force: Sequence[float]
    keepable: bool
    """Whether a plan that changes nothing may be kept without storing anything: its
    summary was made at the group's marker now, and the report changes none of its rows."""
    woken: bool
    """Whether the summary, made anew, moved the shares enough to wake the group."""


def _member(entry: _Entry, group: str) -> planner.Member:
    row = entry.row
    stored = row.figures if row is not None and row.group == group else None
    return planner.Member(namespace_of(entry.key), stored, entry.figures, entry.enforced)


def _ledgers(
    handled: _Handled,
    groups: dict[str, list[_Entry]],
    members: dict[str, list[planner.Member]],
) -> dict[str, _Ledger]:
    """Each group's ledger: its stored summary while it holds (`GroupSummary.read`), moved
    by what the report changes; else one made anew from every live reporter's row, with
    the sums in force counted again from every row counted in the group."""
    queries, markers = handled.queries, handled.markers
    rows = queries.group_rows(list(members))
    for group, row in rows.items():
        markers.setdefault(group, row.marker)
    ledgers: dict[str, _Ledger] = {}
    previous: dict[str, Previous] = {}
    for group, stored in rows.items():
        if stored.levels is None:
            continue
        changing = any(entry.changed for entry in groups[group])
        kept, previous[group] = GroupSummary.read(
            stored.levels, stored.marker, groups[group][0].effective.quotas, changing=changing
        )
        if kept is not None:
            updated = kept.updated(
                [member.stored for member in members[group]],
                [member.figures for member in members[group]],
            )
            keepable = kept.marker == markers.get(group) and not changing
            ledgers[group] = _Ledger(updated, stored.in_force, keepable, False)
    unsummarized = [group for group in members if group not in ledgers]
    if unsummarized:
        peers, counted = _peers(handled, unsummarized)
        for group in unsummarized:
            quotas = groups[group][0].effective.quotas
            summary, woken = planner.summarize(
                markers.get(group, 0), quotas, peers[group], members[group]
            ).wake_after(previous.get(group))
            in_force = counted.get(group) or [0.0] * len(DIMENSIONS)
            ledgers[group] = _Ledger(summary, in_force, False, woken)
    return ledgers


def _peers(
    handled: _Handled, groups: list[str]
) -> tuple[dict[str, list[tuple[str, str, Figures]]], dict[str, planner.Sums]]:
    """The other live reporters' rows in each group; and the group's sums in force counted
    from every row counted in it: the others', and the reporter's own as stored (those it
    no longer reports included, until `_write` drops them)."""
    live, counted = handled.queries.peers(handled.reporter_id, groups, handled.moment)
    peers: dict[str, list[tuple[str, str, Figures]]] = defaultdict(list)
    for group, reporter, key, figures in live:
        peers[group].append((reporter, namespace_of(key), figures))
    among = set(groups)
    mine = [
        (row.group, planner.allocations_of(row.figures))
        for row in handled.rows.values()
        if row.group in among
    ]
    return peers, planner.count([*counted, *mine])


def _kept(plan_id: int, marker: int, entries: list[_Entry], planned: planner.GroupPlan) -> Plan:
    """What the process keeps of a reporter's plan of a group."""
    keys = [entry.key for entry in entries]
    return Plan(
        id=plan_id,
        marker=marker,
        quotas=entries[0].effective.quotas,
        rates=dict(zip(keys, planned.rates, strict=True)),
        fallbacks=dict(zip(keys, planned.fairs, strict=True)),
        early=planned.early,
        counted={keys[position]: rates for position, rates in planned.counted.items()},
    )


def _stale(known: Plan | None, entries: list[_Entry]) -> bool:
    """Whether the reporter must plan a group again, rather than keep its last plan, for a
    reason of its own (its markers aside)."""
    if known is None or known.early or len(known.rates) != len(entries):
        # Early: its grants are about to change (it waits for headroom, or for demands
        # still unknown), and what changes them may not move the marker (`_rose`).
        return True
    if known.quotas != entries[0].effective.quotas:
        return True
    if len(entries) == 1:  # the common case, without a generator
        return entries[0].changed or entries[0].key not in known.rates
    return any(entry.changed or entry.key not in known.rates for entry in entries)


def _totals(summary: GroupSummary, in_force: list[float]) -> tuple[int, tuple[GroupTotals, ...]]:
    """A group's reporters, and per dimension its limit and the sums of demand (where known)
    and allocations in force (this report's new grants included)."""
    totals: list[GroupTotals] = []
    for name, dimension, allocated in zip(DIMENSIONS, summary.dimensions, in_force, strict=True):
        if dimension is None:
            totals.append((name, -1.0, 0.0, -1.0))
        else:
            totals.append((name, dimension.levels.quota, dimension.demand, allocated))
    return summary.reporters, tuple(totals)


def _settle(entries: list[_Entry], plans: dict[str, Plan], replanned: set[str]) -> None:
    """Put each namespace's granted rates in its figures; a changed allocation is written.

    Allocations are what other reporters' headroom is computed from, so any real change to
    them is recorded (and changes the group's inputs). A group not planned again has the
    plan its rows were settled with.
    """
    for entry in entries:
        group = entry.effective.group
        if group is not None and entry.effective.limited:
            if group not in replanned:
                continue
            planned = plans[group]
            rates = planned.counted.get(entry.key) or planned.rates[entry.key]
            entry.planned = planned.marker  # stored if the row is written
        else:
            rates = _ALL_UNLIMITED
            if entry.planned is not None:
                entry.planned = None
                entry.write = True
        figures = list(entry.figures)
        for at, after in zip(ALLOCATIONS, rates, strict=True):
            before = figures[at]
            if (before is None) != (after is None) or (
                before is not None and after is not None and moved(before, after, ALLOCATION_CHANGE)
            ):
                figures[at] = after
                entry.changed = entry.write = True
        entry.figures = tuple(figures)


def _write(
    queries: UsageRepository,
    reporter_id: str,
    entries: list[_Entry],
    dropped: list[tuple[NamespaceKey, Row]],
    saved: list[Saved],
    now: datetime,
) -> int | None:
    """Write the rows due, drop namespaces no longer reported, store the groups planned
    (``saved``), and change the markers of the groups whose inputs changed (with the
    groups stored, those among them). Returns the new token of the reporter's rows, if any
    was written or dropped."""
    rows: list[Written] = []
    changed = {stored.group for _, stored in dropped if stored.group is not None}
    # Rows that leave a group (dropped, or moved to another group) take their allocations
    # out of its sums in force; each report adds what its own grants change (`_plan`).
    leaving = [stored for _, stored in dropped]
    leaving += [
        entry.row
        for entry in entries
        if entry.row is not None and entry.row.group != entry.effective.group
    ]
    left = planner.count((row.group, planner.allocations_of(row.figures)) for row in leaving)
    for entry in entries:
        if not entry.write:
            continue
        group = entry.effective.group
        rows.append((entry.key, group, entry.planned, entry.figures))
        if entry.changed and not _rose(entry):
            for name in (group, entry.row.group if entry.row is not None else None):
                if name is not None:
                    changed.add(name)
    token = new_token() if rows or dropped else None
    # The groups stored before their sums in force lose what left them.
    moved_already = queries.write(reporter_id, now, rows, saved, changed, token)
    if dropped:
        queries.drop(reporter_id, [key for key, _ in dropped])
    queries.take_in_force(left)
    queries.move_markers(changed - moved_already, now)
    return token


def _rose(entry: _Entry) -> bool:
    """Whether the only input of its group that the report changes is its row's allocations,
    risen (none fell): the group's marker then stays, as no other reporter's plan is out of
    date. A rise takes headroom that the others' plans did not count on (each took what was
    free when it was made, and is kept: `granted` never lowers a rate for want of headroom);
    it changes no fair share (those come from demands); and the group's summary, stored
    with it, is settled by the grant (`Levels.settled_shortfall`). Headroom is freed only by what
    moves the marker (a fall, a reporter gone), and the round of plans that follows shares
    it out whole: each grant takes the same fraction of what it lacks (what is free over
    the summary's shortfall, both settled by the grants before it). So after a storm of
    joins, the thousands of rises that fill the headroom no longer make every other worker
    plan the group again, once per rise."""
    row = entry.row
    if row is None or row.group != entry.effective.group:
        return False
    before, after = row.figures, entry.figures
    for at, (old, new) in enumerate(zip(before, after, strict=True)):
        if old == new:
            continue
        if at not in _ALLOCATION_AT or old is None or new is None or new < old:
            return False
    return True


def _limits_json(effective: Effective, written: dict[int, bytes]) -> bytes:
    """The JSON of a group's limits, written once per answer (by the limits' identity:
    every one is alive until the answer is made)."""
    limits = effective.limits
    if limits is None:
        return b"null"
    known = written.get(id(limits))
    if known is None:
        known = written[id(limits)] = limits.model_dump_json().encode()
    return known


def _answer(
    state: ReporterState,
    entries: list[_Entry],
    generation: int,
) -> LastAnswer:
    """The answer's namespaces: the JSON of a `ReportResult`'s, and whether to report early.

    Each namespace's part is serialized once and kept while its group (the admin
    generation) and its plan stay the same.
    """
    kept = state.answers
    early = False
    limits_json: dict[int, bytes] = {}
    parts: list[bytes] = []
    fair: list[Rates] = []
    for entry in entries:
        effective = entry.effective
        group = effective.group
        planned = state.plans[group] if group is not None and effective.limited else None
        plan_id = 0
        fallbacks = _ALL_UNLIMITED
        if planned is not None:
            early = early or planned.early
            plan_id = planned.id
            fallbacks = planned.fallbacks[entry.key]
        fair.append(fallbacks)
        known = kept.get(entry.key)
        if known is not None and known.generation == generation and known.plan == plan_id:
            parts.append(known.json)
            continue
        rates = _ALL_UNLIMITED if planned is None else planned.rates[entry.key]
        limits = _limits_json(effective, limits_json)
        part = answers.namespace_part(entry.ref, group, limits, rates, fallbacks, effective.mode)
        kept[entry.key] = Answer(generation, plan_id, part)
        parts.append(part)
    return LastAnswer(
        [entry.ref for entry in entries],
        generation,
        b",".join(parts),
        early,
        held_ranges([entry.key for entry in entries], state.rows, fair),
    )
