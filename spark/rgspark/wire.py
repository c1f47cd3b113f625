"""The wire contract between rgspark and the ResourceGroups server: what both must agree on.

A worker reports, per namespace and per dimension, what it used and its demand
(``POST /quota/v1/reporters/{id}/reports``); the server answers with an allocation per
dimension. The names and figures below are read the same way on both sides, so they are
defined once, here, and the server imports them: the server depends on rgspark, never
the reverse. A change here is a change to the protocol.

Public (not ``rgspark._wire``) because another package imports it; jobs have no use for it.
Standard library only, and Python 3.9 syntax: it ships in the executors' zip.
"""

from __future__ import annotations

import math
import re
import secrets

__all__ = [
    "ALLOCATION_CHANGE",
    "BURST_S",
    "DEMAND_CHANGE",
    "DIMENSIONS",
    "ENFORCE",
    "GRACE_INTERVALS",
    "JOB_ID_PATTERN",
    "JOB_SEPARATOR",
    "KEPT_ACTIONS",
    "KEPT_HEADER",
    "KINDS",
    "MAX_ACTIONS_PER_POST",
    "MODES",
    "OBSERVE",
    "RATE_FIELDS",
    "SIGNIFICANT_CHANGE",
    "UNKNOWN_DEMAND",
    "UNLIMITED_ALLOCATION",
    "demand_range",
    "fell",
    "held_range",
    "job_of",
    "job_range",
    "job_reporter_id",
    "moved",
]

#: The kinds of traffic: written (``publish``) and read (``dispatch``), as in Pulsar.
KINDS = ("publish", "dispatch")
#: The enforced dimensions, as reports and answers name them: a kind followed by ``Msgs``
#: (rows, in Spark) or ``Bytes``. Every per-dimension sequence on either side is in this order.
DIMENSIONS = ("publishMsgs", "publishBytes", "dispatchMsgs", "dispatchBytes")
#: Each dimension's configured rate: its field in a group's JSON (Pulsar's name), as the
#: answers' ``limits`` and the usage history carry it.
RATE_FIELDS = {
    "publishMsgs": "publishRateInMsgs",
    "publishBytes": "publishRateInBytes",
    "dispatchMsgs": "dispatchRateInMsgs",
    "dispatchBytes": "dispatchRateInBytes",
}

#: A group's modes, as each namespace's part of an answer says them (``mode``): its workers
#: hold rows back to their allocations (``enforce``), or are planned alike but hold nothing
#: back, recording what enforcing would have done (``observe``). No ``mode``: enforce.
ENFORCE = "enforce"
OBSERVE = "observe"
MODES = (ENFORCE, OBSERVE)

#: An allocation (or fallback allocation) in an answer that limits nothing.
UNLIMITED_ALLOCATION = -1.0
#: The most demand a report may carry, and what a reporter sends while it does not know its
#: demand yet: the server reads this or more as "owed a fair share until it says more". Far
#: above any real rate (an exabyte per second), low enough that sums stay exact in a double.
UNKNOWN_DEMAND = 1e18
#: Report intervals past its last answer's lease (``leaseMs``) after which the server counts a
#: reporter gone, its rows deleted and its share freed; a worker that cannot reach the server
#: holds its last allocation until then (fail-static), never longer.
GRACE_INTERVALS = 2
#: On a report answered 503 without being stored (it waited too long in line), the
#: milliseconds after the report was sent for which the server still counts its worker alive,
#: holding its last allocation: the worker holds it as long (then the grace), rather than
#: falling back while the server counts it. 0: the server does not count it (its share is
#: the others'), and it holds nothing of its own until a report of it is stored. Absent:
#: not known (the server could not look).
KEPT_HEADER = "X-Lease-Kept-Ms"
#: A job's id (``DELETE /quota/v1/jobs/{jobId}``): what a `ResourceGroupClient` draws on the
#: driver and ships to its tasks, so that the driver can free all of its workers' shares in
#: one call when the application ends. No `JOB_SEPARATOR` in it, so that a reporter id's job
#: is the part before its first one.
JOB_ID_PATTERN = r"^[A-Za-z0-9_]{1,32}$"
#: Between the job and the rest of a reporter id (``{job}-{random}``). Reporter ids are 1-64
#: of ``A-Z a-z 0-9 _ -``; an id made without a job (32 hex digits) has none.
JOB_SEPARATOR = "-"
_JOB_ID = re.compile(JOB_ID_PATTERN)
#: A job's figures (``/quota/v1/jobs/{job}/figures``): the most actions one post names, and
#: the actions kept per role and kind, the latest by start (totals count every one).
MAX_ACTIONS_PER_POST = 64
KEPT_ACTIONS = 16

#: Seconds of its rate that a reporter's bucket holds: enough for the slices the Spark
#: helpers charge (about 100 ms of rate), small enough that reporters waking together
#: cannot burst far past the group's rate (the server's allocator says why: "Burst").
BURST_S = 0.1

#: A figure (usage, demand, a level) that moved by less than this is not news: the server
#: keeps what it recorded rather than rewrite it, so that a steady group's inputs, and
#: grants, stay the same from one report to the next (the allocator's "Held figures").
SIGNIFICANT_CHANGE = 0.05
#: An allocation that moved by less than this is the same: the server keeps the one in
#: force, and a worker's bucket (which holds its rate to a millionth) has it as granted.
ALLOCATION_CHANGE = 0.001
#: A demand that moved by more than this since the last report is reported before the
#: interval is up, as PIP-82's brokers do on a significant change. It must stay above
#: `SIGNIFICANT_CHANGE`: a smaller move is held by the server, so reporting it early would
#: change nothing.
DEMAND_CHANGE = 0.10


def held_range(before: float, tolerance: float = SIGNIFICANT_CHANGE) -> tuple[float, float]:
    """The figures that count as unchanged from ``before`` (0 or more), as ``(low, high)``:
    the 5% rule, defined here once. A figure moved when it went down by more than
    ``tolerance`` of what it was, or up by more than ``tolerance`` of what it became (rates
    under 1 count as 1): ``|after - before| > tolerance * max(before, after, 1)``.

    As a range, checking a figure is two comparisons, which is what a steady report of
    thousands of namespaces needs.
    """
    # Down: moved once before - after > tolerance * max(before, 1).
    low = before - tolerance * max(before, 1.0)
    # Up: moved once after - before > tolerance * max(after, 1); solved for after, on
    # whichever side of 1 it lands.
    high = before / (1.0 - tolerance)
    if high < 1.0:
        high = before + tolerance
    return low, high


def moved(before: float, after: float, tolerance: float = SIGNIFICANT_CHANGE) -> bool:
    """Whether a figure moved out of `held_range` of ``before``."""
    low, high = held_range(before, tolerance)
    return not low <= after <= high


def demand_range(
    before: float, share: float | None, tolerance: float = SIGNIFICANT_CHANGE
) -> tuple[float, float]:
    """The demands that count as unchanged from ``before`` for a reporter whose fair share
    in the dimension is ``share`` (None, or an unlimited allocation: its group does not
    limit the dimension), as ``(low, high)``: those that change no grant.

    Any, where the group does not limit the dimension. Where ``before`` is above the share
    (and known), `held_range` and anything above the share: the allocator gives a reporter
    ``min(demand, level)``, and its fair share is that level when it wants more. Otherwise
    `held_range`. A throttled worker's demand is its usage over the short, noisy time it
    was not held back (and so is the bytes demand of one held back by its msgs rate): it
    moves by more than 5% at nearly every report, most often where it changes nothing.

    A share from before the group's level rose may be out of date; should the level now be
    above ``before``, the next plan's share is ``before``, no longer below it, and the
    demand is taken as it is one report later.
    """
    if share is None or share < 0:
        return -math.inf, math.inf
    low, high = held_range(before, tolerance)
    if share < before < UNKNOWN_DEMAND:
        return min(low, share), math.inf
    return low, high


def fell(before: float, after: float) -> bool:
    """Whether an allocation fell from ``before`` to ``after`` (by more than
    `ALLOCATION_CHANGE`): a fall the server counts at ``before`` until the worker says it
    enforces ``after``, and the worker says so at once."""
    return after < before and moved(before, after, ALLOCATION_CHANGE)


def job_reporter_id(job: str) -> str:
    """A new reporter id of the job: ``{job}-`` and 24 random hex digits (at most 57
    characters, within the 64 of a reporter id)."""
    return f"{job}{JOB_SEPARATOR}{secrets.token_hex(12)}"


def job_of(reporter_id: str) -> str | None:
    """The job a reporter id names: the part before its first `JOB_SEPARATOR`, if that is
    a job id; None for an id without one."""
    job, separator, _ = reporter_id.partition(JOB_SEPARATOR)
    return job if separator and _JOB_ID.fullmatch(job) else None


def job_range(job: str) -> tuple[str, str]:
    """The reporter ids whose `job_of` is ``job``, as ``low <= id < high`` compared byte by
    byte: those that begin with ``{job}-``. ``.`` follows ``-`` in ASCII, and nothing that a
    reporter id may hold lies between them."""
    return f"{job}{JOB_SEPARATOR}", f"{job}."
