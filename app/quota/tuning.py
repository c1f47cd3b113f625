"""Every tuning constant of quota sharing, named once: what it trades, and what chose it.

The modules that use them import them from here. A constant marked *reasoned* was set by
the argument given and no benchmark has compared other values; one marked *measured* names
the benchmark that chose it. Limits on input (`app.quota.schemas`) and the wire's figures
(`rgspark.wire`) are contracts, not tuning, and stay where they are defined.
"""

from __future__ import annotations

# --- The allocator (`app.quota.allocator`): how a group's rate is split --------------------

FLOOR = 0.01
"""Of an equal share: the least any reporter is allocated, so that an idle worker that
wakes has a trickle to measure its demand with. Reasoned: small enough that 100 idle
workers hold 1% of a group's rate."""
PROBE = 0.02
"""Of the larger of a newcomer's fair and equal shares (and of the quota in all): a
newcomer's first grant when no headroom is free, taken from the room others leave as they
fall. Reasoned; held to DESIGN.md's bars by ``benchmarks.quota_sim`` (a join converges within
3 intervals) and ``benchmarks.fleet`` (the bound at a join)."""
GROWTH = 0.25
"""Of a reporter's fair share: the room out of spare quota a reporter may grow into above
its demand, so that a demand that rises is met within an interval. Reasoned; checked by
``benchmarks.quota_sim``'s utilization bar (98-102%)."""
WAITING = 0.95
"""Of its fair share: below it, a grant is still waiting for headroom, and its reporter is
asked to report again early (`EARLY_REPORT`)."""
EARLY_REPORT = 0.125
"""Of the report interval: when a reporter still waiting for its share reports again, so
that it settles within the 3 intervals DESIGN.md allows. Measured: ``benchmarks.quota_sim``
(convergence_intervals on every scenario)."""

# --- The planner and summaries (`app.quota.planner`, `app.quota.levels`) -------------------

PACED_RISE = 0.01
"""Of its rate: the least rise a paced reporter takes (`app.quota.pacing`); a smaller one
would bring it back once more a pace later for nothing. Measured, a lean rather than a
proof: ``benchmarks.join_storm --seconds 20``, alternated (2026-11-29): what the workers
enforced went past 105% of the quota in 1 of 20 runs with it (to 105.4%), in 3 of 15
without (to 105.5%, 1.3-2.6 s into the storm, every answered worker in its grace); sheds
and first answers alike. The number itself is reasoned."""
SUMMARY_SHARE = 1 / 32
"""Of a group's reporters: how many grants one summary of its water levels serves once its
inputs changed, before the next report summarizes the group anew (O(n)); groups of up to 32
reporters are summarized at every change. Measured: ``benchmarks.group_size --sizes
10,100,1000 --min-reports 1000``, two runs each, alternated (2026-11-29): a report in a
group of 1,000 changing at every report cost 3.0-3.4 ms of CPU with it, 10.0-10.1 ms when
summarized at every change (3.5-4.5 ms at 10 and 100 either way). The share itself is
reasoned."""
LEAVE_WAKE = 0.02
"""Of a group's allocations in force: a leave that frees this much wakes the group's other
reporters (`app.quota.changes`), so that the room is taken within a second, not at their
next report. Measured: ``benchmarks.fleet benchmarks/scenarios/join-leave.json
--duration-scale 0.5``, two runs each (2026-11-29): with leaves waking the group, the
others took the room a leave freed within 1 interval (utilization 99.0%); with none, within
5 (92.7-92.9%). The number itself is reasoned, beside the 5% rule for moved shares."""

# --- Reports on arrival (`app.quota.store`) -------------------------------------------------

STALE_REPORT_INTERVALS = 2
"""Report intervals: a report older than this when it arrives (by its ``sentAtMs``) is not
stored; its worker has sent a newer one since. Reasoned."""

# --- Which of a reporter's groups moved (`app.quota.store`, `app.quota.repository`) --------

FEW_GROUPS = 16
"""A reporter of no more groups (a Spark worker plans one) reads their markers as they are,
at every report: a paced worker's look at the markers changed since its last report, and
its full looks, cost its lane more than the rest of its report (found on
``benchmarks.usage_ingest --shape spark --spark-every 8``). A broker's thousands, read so,
would cost each of its reports more than all the rest: ``benchmarks.marker_reads`` read
5,000 groups' markers by name in 10.1-13.7 ms, 16 in 0.23-0.42 ms, against 0.21-0.78 ms
for a look at those changed; comparing the 5,000 planned markers in the database, which
answers only those that differ, took 11.8 ms (2026-11-29). The number itself is
reasoned."""
FEW_MARKERS = 100
"""A reporter of more groups (a broker) reads the markers changed since its last report,
in index order and limited to this (or its rows), so that old statistics never make the
database scan every group's marker; past it, the full comparison. Reasoned."""
LATE_COMMIT_S = 5.0
"""How much further back than its last report such a look reaches (an interval at most),
for changes that committed later than they were made: a broker's report takes about a
second. Reasoned; what it misses, the next full look finds (`FULL_LOOK_INTERVALS`)."""
FULL_LOOK_INTERVALS = 3
"""With the longest lease: how often a reporter of many groups compares every row with its
group's marker. Reasoned."""
MARKER_LOOK_S = 0.1
"""How long a read of some groups' markers by name serves the process's other reports: a
report served by an earlier read is one that arrived that much earlier, and what it missed,
its next report finds. Measured (counted): on ``benchmarks.usage_ingest --shape spark``,
78-93% of the workers' reads were served by one another report made. The looks at changed
markers of reporters of more groups are not shared: sharing them served 37 of
``--shape broker --quick``'s 127 looks, and its steady intervals took 0.39-0.44 s with it
against 0.29-0.34 s without (three runs each, alternated, 2026-11-29)."""

# --- The process's memory (`app.quota.cache`) ------------------------------------------------

MAX_REPORTERS = 20_000
"""Reporters whose rows and plans a process remembers, the least recently reporting
forgotten first (their next report reads its rows again). Reasoned."""
MAX_NAMESPACES = 1_000_000
"""Namespaces of the reporters remembered, summed (``RG_REPORT_CACHE_NAMESPACES``; about
1.4 KB each: a broker reporting 5,000 namespaces holds 7 MB): past it, the least recently
reporting are forgotten first, whatever a role does."""
MAX_MARKERS_READ = 10_000
"""Groups whose markers, as last read, a process keeps at once (`MARKER_LOOK_S`)."""

# --- Admission: lanes and pacing (`app.quota.lanes`, `app.quota.pacing`) ---------------------

MAX_BATCH = 32
"""Reports of one namespace stored in one transaction: it holds the group's lock, which
reports of the group from other processes wait for, while it stores them all. Lanes were
measured (steady reports alone took 2.6 s at p50 at 300 reports/s, against 56 ms in batches,
``benchmarks.usage_ingest --shape spark``); the number itself is reasoned."""
JOIN_WAIT_S = 8.0
"""How long a worker's first report may wait in its lane: its worker runs nothing before
its first answer and is not counted, so it loses nothing by waiting, while a 503 sends it
back to the end of the line later. Under rgspark's 10 s request timeout. Measured:
``benchmarks.join_storm`` (2,000 workers joining within 3 s, two processes) answered every
worker within 6.1-7.5 s, against 12-18 s when first reports were shed at two intervals."""
SATURATED = 0.25
"""Of the longest a report may wait in its lane: a lane whose reports wait this long is
saturated (half a second with the default interval), and paces its workers; a report that
waits this long keeps its worker alive (`app.quota.lanes`). Measured for the keep:
``benchmarks.usage_ingest --shape spark`` at 500 reports/s, 3 alternated runs (2026-11-29):
median report 1.4-2.5 ms, against 4.9-6.0 ms keeping every report that waited at all (4,732
keeps beside 9,012 stores). The number itself is reasoned."""
UTILIZATION = 0.5
"""Of its time, what a lane is kept busy with its paced workers' reports; the rest is for
what must not wait for the pace (a fall's confirmation, an admin change)."""
SPREAD = 0.5
"""Each answer's pace is the namespace's, up to this much longer at random, so that a job's
workers paced together do not come back together. Measured: ``benchmarks.join_storm
--seconds 20``, alternated (2026-11-29): without the spread, 3 of 11 runs left workers
unanswered at the end, and in the median run the workers then enforced 40% of the quota;
with it, 1 of 20 and 59%. The number itself is reasoned."""
MOST_FALL = 2.0
"""A pace falls by at most this factor at once, so that it comes down once a storm is over
without letting the storm back in."""
LEAST_PACE = 0.1
"""Of the report interval: a pace below this is none."""

# --- Pushed changes (`app.quota.changes`) ----------------------------------------------------

POLL_S = 0.2
"""How often a process reads the admin generation while a watcher waits: a change reaches
every worker within a second (DESIGN.md), whatever process made it."""
MAX_WAIT_S = 60.0
"""The longest a watch request may ask to wait."""
