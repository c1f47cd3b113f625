"""Destinations that push back: retrying what they refused, and a worker's rate under its share.

A job's `send` says the destination is overloaded by raising `SlowDown`, or an HTTP client's
error for a 429 or 503 answer (`as_slow_down`). `throttled_sink` and `throttled` then send
the same rows again after the delay asked for (`send_with_retry`), and hold the worker
process below its allocation with a `PushbackCap`: one per (worker process, namespace,
kind), so that every task of the process slows down together.

The cap's rate follows `AimdRate`, TCP's congestion control applied to a rate: on a pushback
it falls to `DECREASE` of the rate that was pushed back; it then rises quickly (doubling
every `DOUBLING_S`: slow start) to `GOOD` of that rate, the last one known to be nearly
good, and from there by `INCREASE` of it per second while sends succeed (additive increase,
quickening the longer no pushback comes: `PROBE_S`). The destination's own limit is thus
probed gently from below: the cap spends most of its time between `GOOD` and 1 of it.
Above the allocation the cap holds nothing back, but it is kept: the allocation follows the
demand, which the cap holds down, so it soon falls to the cap, and a cap dropped there would
be forgotten at each step of the way back up (and the next pushback would start again from a
burst at a risen allocation). It is lifted once it reaches `LIFT` times the rate last pushed
back: the destination's limit has moved.

The cap waits apart from the group's limits (its own `TokenBucket`, which the demand
estimators never see), and the demand a worker reports is at most what the destination takes
(`AimdRate.usable`), so that the group's other namespaces are granted the rest. A retry's
delay, by contrast, is counted as held back (`held_retry`): rows refused are rows the worker
wants to send now.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ._bucket import TokenBucket
from ._exceptions import SlowDown
from .wire import BURST_S

if TYPE_CHECKING:
    from ._quota import NamespaceQuota

__all__ = [
    "AimdRate",
    "PushbackCap",
    "as_slow_down",
    "backoff_s",
    "cap_for",
    "held_retry",
    "retry_after_s",
    "retry_delay_s",
    "send_with_retry",
]

T = TypeVar("T")

DECREASE = 0.85  # of the rate pushed back: the cap right after a pushback
GOOD = 0.95  # of the rate pushed back: where slow start ends and additive increase begins
INCREASE = 0.03  # of the rate pushed back, per second of successful sends
DOUBLING_S = 0.25  # slow start doubles the cap this often
# Without a pushback, the additive increase doubles every this many seconds of sends: a
# worker whose co-senders left, or whose destination's limit rose, climbs to the new limit in
# seconds rather than at INCREASE for minutes; early in a cycle it is INCREASE still.
PROBE_S = 2.0
# Pushbacks this soon after the cap fell are the same overload, seen late: a destination
# that counts over a window still holds the rows sent before it fell. One decrease per
# overload, as TCP makes one per round trip; they are retried all the same.
RECOVERY_S = 1.0
# Of the rate pushed back: the cap is lifted at this (from GOOD, about 7 s of sends that
# all went through, at PROBE_S).
LIFT = 2.0
MIN_RATE = 1.0  # rows per second: the cap never falls below, so a task always ends
# A pause between sends longer than this counts as this much: the cap rises while sends
# succeed, not while a task waits for its input.
MAX_STEP_S = 0.5
MEASURE_S = 1.0  # the rate a worker sends at is measured over this many seconds
BACKOFF_S = 0.1  # the first retry's delay when the destination names none; doubled since
MAX_BACKOFF_S = 5.0
MAX_RETRY_AFTER_S = 600.0  # a longer Retry-After is held to this
# A shorter one is waited this long: a destination answering "0" again and again must not
# turn the retries into a busy loop.
MIN_RETRY_S = 0.01
PUSHBACK_STATUSES = frozenset({429, 503})
_NS_PER_SECOND = 1_000_000_000


def as_slow_down(exc: BaseException, *, now: datetime | None = None) -> SlowDown | None:
    """`exc` as a pushback: itself when a `SlowDown`; a `SlowDown` after the response's
    ``Retry-After`` when an ``httpx.HTTPStatusError`` or ``requests.HTTPError`` whose response
    has status 429 or 503; else None (an error that must not be retried)."""
    if isinstance(exc, SlowDown):
        return exc
    response = _http_response(exc)
    if response is None or getattr(response, "status_code", None) not in PUSHBACK_STATUSES:
        return None
    headers = getattr(response, "headers", None)
    value = headers.get("Retry-After") if isinstance(headers, Mapping) else None
    return SlowDown(retry_after_s(value, now=now))


def _http_response(exc: BaseException) -> Any:
    # Only libraries the job imported: rgspark depends on neither for this.
    for module_name, class_name in (("httpx", "HTTPStatusError"), ("requests", "HTTPError")):
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return getattr(exc, "response", None)
    return None


def retry_after_s(value: object, *, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header's delay in seconds (delta-seconds, decimals accepted, or an
    HTTP date), between 0 and `MAX_RETRY_AFTER_S`; None when absent or not understood."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def backoff_s(attempt: int) -> float:
    """The delay before retry `attempt` (0 first) when the destination names none."""
    return min(BACKOFF_S * 2.0**attempt, MAX_BACKOFF_S)


class AimdRate:
    """The rate a worker process holds itself to below its allocation after pushbacks.

    `rate` is None (no cap: the allocation holds) until a pushback. `pushed_back` lowers it
    (at most once per `RECOVERY_S`) to `DECREASE` of the rate then in force: the lowest of
    the cap, the allocation and the rate the process sent at over the last `MEASURE_S`.
    `sent` counts rows that went through and raises the cap by the time since the previous
    call: doubling every `DOUBLING_S` up to `GOOD` of the rate pushed back (slow start),
    then `INCREASE` of it per second, a pace that doubles every `PROBE_S` of sends. The cap
    holds only while it is below the allocation, and is lifted at `LIFT` times the rate
    pushed back. A pushback with no cap and less than `MEASURE_S` of sends sets none.

    Pure arithmetic on `clock` (monotonic nanoseconds), so tests move time by hand. Every
    method may be called from any thread: the tasks of a worker share one.
    """

    # Thread safety: the state is read and changed only under `_lock`.
    __slots__ = (
        "_ceiling",
        "_clock",
        "_decreased",
        "_last",
        "_lock",
        "_probed_s",
        "_rate",
        "_sends",
        "_start",
        "_threshold",
    )

    def __init__(self, *, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or time.monotonic_ns
        self._lock = threading.Lock()
        self._rate: float | None = None
        self._ceiling = 0.0  # the rate last pushed back
        self._threshold = 0.0  # where slow start ends
        self._probed_s = 0.0  # seconds of sends since the cap last fell
        self._last = self._decreased = self._clock()
        self._start: int | None = None  # the first send
        self._sends: deque[tuple[int, float]] = deque()  # (when, rows) over MEASURE_S

    def rate(self, allocation: float | None = None) -> float | None:
        """The cap in force, rows per second; None when there is none (or it is not below
        `allocation`, the rate the group allows: None unlimited)."""
        with self._lock:
            rate = self._rate
        if rate is None or (allocation is not None and rate >= allocation):
            return None
        return rate

    def pushed_back(self, allocation: float | None = None) -> float | None:
        """A pushback: the cap falls by `DECREASE`, unless it fell less than `RECOVERY_S`
        ago; returns the cap (None when there is nothing to lower from: no cap, and less
        than `MEASURE_S` of sends)."""
        with self._lock:
            now = self._clock()
            if self._rate is not None and now - self._decreased < RECOVERY_S * _NS_PER_SECOND:
                return self._rate
            measured = self._measured(now)
            if self._rate is None and measured is None:
                return None  # too new to tell its rate: the retry's delay alone paces it
            # The lowest of the rates that held: the allocation, the cap, and what went
            # through over the last MEASURE_S (no more than the destination took).
            candidates = [allocation, self._rate, measured]
            known = [rate for rate in candidates if rate is not None and rate > 0]
            if not known:
                return None
            base = min(known)
            self._ceiling = base
            self._threshold = max(MIN_RATE, GOOD * base)
            self._rate = max(MIN_RATE, DECREASE * base)
            self._last = self._decreased = now
            self._probed_s = 0.0
            return self._rate

    def sent(self, rows: float) -> None:
        """`rows` went through: counted in the measured rate, and the cap rises."""
        with self._lock:
            now = self._clock()
            if self._start is None:
                self._start = now
            self._sends.append((now, rows))
            self._measured(now)  # drops what is past the window
            elapsed = min((now - self._last) / _NS_PER_SECOND, MAX_STEP_S)
            self._last = now
            rate = self._rate
            # It rises even above the allocation: the worker's demand is measured from the
            # time the group holds it back, and its allocation follows its demand, so only a
            # cap above the allocation lets the allocation grow back.
            if rate is None or elapsed <= 0:
                return
            rate = self._risen(rate, elapsed)
            self._probed_s += elapsed
            self._rate = None if rate >= LIFT * self._ceiling else rate

    def usable(self, seconds: float) -> float | None:
        """The most the destination is known to take over the next `seconds`: the rate last
        pushed back, or the cap by then when it has risen above it; None with no cap.

        What the worker reports as its demand at most (`NamespaceQuota.bound_demand`), so
        that its allocation stays about the destination's limit, above the cap, and the cap
        is the limit that holds while it probes. Held back by a lower allocation instead,
        the worker's demand would read as all it could send, and the group would grant it
        the share that the destination refuses and the other namespaces could use."""
        with self._lock:
            rate = self._rate
            return None if rate is None else max(self._ceiling, self._risen(rate, seconds))

    def _risen(self, rate: float, seconds: float) -> float:
        """`rate` after `seconds` of slow start, then of additive increase (at its pace
        now: `PROBE_S`)."""
        if rate < self._threshold:
            slow_s = DOUBLING_S * math.log2(self._threshold / rate)
            if seconds <= slow_s:
                return rate * math.pow(2.0, seconds / DOUBLING_S)
            rate, seconds = self._threshold, seconds - slow_s
        pace = INCREASE * self._ceiling * math.pow(2.0, self._probed_s / PROBE_S)
        return rate + pace * seconds

    def _measured(self, now: int) -> float | None:
        """Rows per second sent over the last `MEASURE_S`; None before the process has sent
        for that long: a task's first sends go at the trickle a worker starts with."""
        window = round(MEASURE_S * _NS_PER_SECOND)
        sends = self._sends
        while sends and sends[0][0] <= now - window:
            sends.popleft()
        if self._start is None or now - self._start < window:
            return None
        return sum(rows for _, rows in sends) / MEASURE_S

    def __repr__(self) -> str:
        return f"AimdRate(rate={self._rate!r}, ceiling={self._ceiling!r})"


class PushbackCap:
    """An `AimdRate` and the bucket that holds a worker process to it; `clock` (monotonic
    nanoseconds) and `sleep` are injected by tests to run on fake time.

    A sink calls `waited_s` after each send that went through; the seconds it returns are
    the cap's wait, which it sleeps apart from the group's limits. A function fed batches
    is charged before it gets one (`wait_s`) and counted once it took the next (`sent`).
    """

    __slots__ = ("_bucket", "_clock", "_lock", "control", "sleep")

    def __init__(
        self,
        *,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._clock = clock
        #: What the sink and `throttled` wait with: a retry's delay, the cap's waits.
        self.sleep = sleep
        self._lock = threading.Lock()
        self._bucket: TokenBucket | None = None
        self.control = AimdRate(clock=clock)

    def rate(self, allocation: float | None) -> float | None:
        """The cap in force (rows per second), None when the allocation holds (with
        ``allocation`` None: the cap kept, holding or not)."""
        return self.control.rate(allocation)

    def usable(self, seconds: float) -> float | None:
        """The most the destination is known to take over the next `seconds`
        (`AimdRate.usable`)."""
        return self.control.usable(seconds)

    def pushed_back(self, allocation: float | None) -> None:
        self.control.pushed_back(allocation)

    def sent(self, rows: float) -> None:
        """`rows` went through: the cap rises (`AimdRate.sent`)."""
        self.control.sent(rows)

    def wait_s(self, rows: float, allocation: float | None) -> float:
        """Charge `rows` at the cap: seconds to wait (0 when no cap holds)."""
        rate = self.control.rate(allocation)
        with self._lock:
            if rate is None:
                self._bucket = None  # lifted: a later cap starts afresh
                return 0.0
            bucket = self._bucket
            if bucket is None:
                # Empty at first: the rows charged now are the cap's first.
                bucket = self._bucket = TokenBucket(
                    rate, rate * BURST_S, initial_tokens=0, clock=self._clock
                )
            elif bucket.rate != rate:
                bucket.set_rate(rate, rate * BURST_S)
        bucket.consume(rows)
        return 0.0 if bucket.contains_tokens() else bucket.throttling_duration()

    def waited_s(self, rows: float, allocation: float | None) -> float:
        """`rows` went through (`sent`), charged at the cap (`wait_s`): seconds to wait
        before the next send."""
        self.sent(rows)
        return self.wait_s(rows, allocation)


def send_with_retry(
    send: Callable[[], T],
    cap: PushbackCap,
    allocation: Callable[[], float | None],
    wait: Callable[[float], object] | None = None,
) -> tuple[T, int, float]:
    """``send()`` until it is not pushed back; returns its result, the pushbacks and the
    seconds waited for them (with `wait`, else ``cap.sleep``). An error that is no pushback
    is raised as it is."""
    pushbacks = 0
    slept = 0.0
    while True:
        try:
            return send(), pushbacks, slept
        except Exception as exc:
            delay = retry_delay_s(exc, cap, allocation, pushbacks)
            if delay is None:
                raise
            pushbacks += 1
            if delay > 0:
                (wait or cap.sleep)(delay)
                slept += delay


def retry_delay_s(
    exc: BaseException, cap: PushbackCap, allocation: Callable[[], float | None], attempt: int
) -> float | None:
    """Seconds to wait before retry `attempt` (0 first) after `exc`; None when `exc` is no
    pushback. The first lowers `cap`: its retries are the same overload, not new ones."""
    slow = as_slow_down(exc)
    if slow is None:
        return None
    if attempt == 0:
        cap.pushed_back(allocation())
    return backoff_s(attempt) if slow.after_s is None else max(slow.after_s, MIN_RETRY_S)


def held_retry(quota: NamespaceQuota, kind: str, cap: PushbackCap) -> Callable[[float], float]:
    """A wait for a retry's delay that `quota`'s demand estimator counts as held back
    (`NamespaceQuota.held_for`).

    Rows pushed back are rows the worker wants to send now and is held from: counted as
    idle, a retry's second reads as a demand of 0, which the worker reports at once (its
    demand moved), and its share falls to a trickle that the retried chunk is then charged
    at. Counted as held, the demand stays what the worker was getting through, which is
    what the destination takes. (The cap's waits, by contrast, are not counted: they are
    the pace of a worker that sends all it can.)
    """

    def wait(seconds: float) -> float:
        return quota.held_for(kind, seconds, cap.sleep)

    return wait


_caps: dict[tuple[str, str, str, str], PushbackCap] = {}
_caps_lock = threading.Lock()


def cap_for(url: str, kind: str, quota: NamespaceQuota) -> PushbackCap:
    """This process's cap for `quota`'s namespace's `kind` on a server, made on first use;
    while it holds, `quota` reports no more demand than it lets through (`AimdRate.usable`)."""
    key = (url, quota.tenant, quota.namespace, kind)
    cap = _caps.get(key)
    if cap is None:
        with _caps_lock:
            cap = _caps.setdefault(key, PushbackCap())
    quota.bound_demand(kind, cap.usable)
    return cap
