"""Pushback, on fake time: what a destination's 429 or `SlowDown` does to a worker's sends."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pyarrow as pa
import pytest

import rgspark
from rgspark import PushbackNotRetriedError, SlowDown, _pushback, throttled, throttled_sink
from rgspark._pushback import (
    BACKOFF_S,
    DECREASE,
    DOUBLING_S,
    GOOD,
    INCREASE,
    LIFT,
    MAX_BACKOFF_S,
    MAX_RETRY_AFTER_S,
    MAX_STEP_S,
    MEASURE_S,
    MIN_RATE,
    PROBE_S,
    RECOVERY_S,
    AimdRate,
    PushbackCap,
    as_slow_down,
    backoff_s,
    held_retry,
    retry_after_s,
    send_with_retry,
)
from rgspark._quota import NamespaceQuota
from rgspark._stats import ActionStats, Figures, add_entry
from tests.spark.conftest import FakeMonotonicClock
from tests.spark.test_throttle_spark import LocalClient, fake_buckets  # noqa: F401 (fixture)

# ---------------------------------------------------------------------------------------------
# The rate: multiplicative decrease, slow start, additive increase


def _history(control: AimdRate, clock: FakeMonotonicClock, rate: float) -> None:
    """`rate` rows/s sent in tenths of a second for a little over `MEASURE_S`, so that a
    pushback knows the rate sent at."""
    for _ in range(round(MEASURE_S * 10) + 1):
        clock.advance(0.1)
        control.sent(rate / 10)


def _pace(probed_s: float) -> float:
    """The additive increase per second, of the rate pushed back, after `probed_s` of sends
    since it fell."""
    return INCREASE * 2 ** (probed_s / PROBE_S)


def test_no_cap_until_a_pushback(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    for _ in range(10):
        clock.advance(0.1)
        control.sent(100)
    assert control.rate(1000.0) is None
    assert control.rate(None) is None


def test_a_pushback_lowers_the_allocation_then_slow_start_then_additive(
    clock: FakeMonotonicClock,
) -> None:
    control = AimdRate(clock=clock)
    assert control.pushed_back(1000.0) is None  # too new to tell its rate: no cap yet
    _history(control, clock, 1000)
    low = DECREASE * 1000
    assert control.pushed_back(1000.0) == pytest.approx(low)
    assert control.rate(1000.0) == pytest.approx(low)
    # Slow start: doubling every DOUBLING_S, but no further than GOOD of the rate pushed back.
    clock.advance(DOUBLING_S / 8)
    control.sent(10)
    assert control.rate(1000.0) == pytest.approx(low * 2 ** (1 / 8))
    clock.advance(DOUBLING_S)
    control.sent(10)
    # Then additive: INCREASE of the rate pushed back per second of successful sends, at first.
    slow_s = DOUBLING_S * math.log2(GOOD / (DECREASE * 2 ** (1 / 8)))
    probed = DOUBLING_S / 8
    good = GOOD * 1000 + _pace(probed) * 1000 * (DOUBLING_S - slow_s)
    assert control.rate(1000.0) == pytest.approx(good)
    clock.advance(0.4)
    control.sent(10)
    probed += DOUBLING_S
    assert control.rate(1000.0) == pytest.approx(good + _pace(probed) * 1000 * 0.4)
    # At the allocation, the cap holds nothing back, but it is kept and rises on...
    for _ in range(30):
        clock.advance(0.1)
        control.sent(10)
    assert control.rate(1000.0) is None
    kept = control.rate()
    assert kept is not None and 1000.0 < kept < LIFT * 1000
    # ...until it reaches LIFT times the rate pushed back (about 7 s from GOOD, quickening):
    # then it is lifted.
    for _ in range(40):
        clock.advance(0.1)
        control.sent(10)
    assert control.rate() is None
    assert control.rate(5000.0) is None


def test_the_increase_quickens_while_no_pushback_comes(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    rises = []
    for second in range(6):
        before = control.rate()
        for _ in range(10):
            clock.advance(0.1)
            control.sent(10)
        after = control.rate()
        assert before is not None and after is not None
        if second in (1, 5):  # past slow start
            rises.append(after - before)
    # Four seconds later, the pace has doubled twice (PROBE_S).
    assert rises[1] / rises[0] == pytest.approx(2 ** (4 / PROBE_S), rel=0.05)


def test_the_decrease_is_from_the_rate_sent_at_when_below_the_allocation(
    clock: FakeMonotonicClock,
) -> None:
    control = AimdRate(clock=clock)
    for _ in range(20):  # 40 rows every 0.1 s: 400 rows/s, under an allocation of 1000
        clock.advance(0.1)
        control.sent(40)
    assert control.pushed_back(1000.0) == pytest.approx(DECREASE * 400)
    # Pushbacks within RECOVERY_S are the same overload: the cap falls once for them all.
    clock.advance(RECOVERY_S / 2)
    assert control.pushed_back(1000.0) == pytest.approx(DECREASE * 400)
    # A later one lowers it again, from the cap.
    clock.advance(RECOVERY_S / 2)
    assert control.pushed_back(1000.0) == pytest.approx(DECREASE * DECREASE * 400)


def test_a_pushback_with_nothing_to_lower_from_sets_no_cap(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    assert control.pushed_back(None) is None  # unlimited, and nothing sent yet
    assert control.rate(None) is None


def test_a_pushback_before_a_full_measure_sets_no_cap(clock: FakeMonotonicClock) -> None:
    # A task's first sends go at the trickle a worker starts with: lowered from that, the
    # cap would hold the worker at a trickle for minutes.
    control = AimdRate(clock=clock)
    for _ in range(5):
        clock.advance(0.1)
        control.sent(2)
    assert control.pushed_back(1000.0) is None
    assert control.rate() is None


def test_the_cap_never_falls_below_the_floor(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    _history(control, clock, 10)
    for _ in range(20):
        control.pushed_back(10.0)
        clock.advance(RECOVERY_S)
    assert control.rate(10.0) == MIN_RATE


def test_the_cap_rises_only_while_sends_succeed(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    clock.advance(DOUBLING_S)
    control.sent(10)
    good = control.rate(1000.0)
    assert good is not None and good > GOOD * 1000  # slow start is over
    clock.advance(60)  # a task waiting for its input: no sends
    control.sent(10)
    # At most MAX_STEP_S counted, at the pace of DOUBLING_S of sends.
    rise = _pace(DOUBLING_S) * 1000 * MAX_STEP_S
    assert control.rate(1000.0) == pytest.approx(good + rise)


def test_an_allocation_that_falls_below_the_cap_holds_instead(clock: FakeMonotonicClock) -> None:
    control = AimdRate(clock=clock)
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    assert control.rate(1000.0) is not None
    assert control.rate(300.0) is None  # the group's limits are lower: they hold


def test_the_cap_holds_a_sender_to_its_rate(clock: FakeMonotonicClock) -> None:
    cap = PushbackCap(clock=clock, sleep=clock.sleep)
    assert cap.waited_s(100, 1000.0) == 0.0  # no cap: nothing waits
    _history(cap.control, clock, 1000)
    cap.pushed_back(1000.0)
    low = DECREASE * 1000
    start = clock()
    sent = 0
    while clock() - start < 1_000_000_000:
        cap.sleep(cap.wait_s(50, 1000.0))
        sent += 50
    # A second's rate, give or take a chunk and the bucket's cushion: the cap has no
    # business rising while nothing is counted as sent.
    assert low <= sent <= low + 2 * 50


# ---------------------------------------------------------------------------------------------
# What counts as a pushback


def _status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://destination/rows")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"{status}", request=request, response=response)


def test_slow_down_is_a_pushback_with_its_delay() -> None:
    slow = SlowDown(after_s=1.5)
    assert as_slow_down(slow) is slow
    assert slow.after_s == 1.5
    assert isinstance(slow, rgspark.RGSparkError)
    assert pickle.loads(pickle.dumps(slow)).after_s == 1.5  # from a worker to the driver
    assert SlowDown().after_s is None


@pytest.mark.parametrize("after_s", [-1, float("nan"), float("inf")])
def test_slow_down_refuses_a_delay_that_is_none(after_s: float) -> None:
    with pytest.raises(ValueError, match="after_s must be a finite number >= 0"):
        SlowDown(after_s)


def test_slow_down_refuses_a_delay_that_is_not_a_number() -> None:
    with pytest.raises(TypeError, match="after_s must be a number"):
        SlowDown("2")  # type: ignore[arg-type]


def test_429_and_503_with_retry_after_are_pushbacks() -> None:
    slow = as_slow_down(_status_error(429, {"Retry-After": "2"}))
    assert slow is not None and slow.after_s == 2.0
    slow = as_slow_down(_status_error(503))
    assert slow is not None and slow.after_s is None  # no delay named: rgspark backs off
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    slow = as_slow_down(
        _status_error(503, {"Retry-After": "Thu, 01 Jan 2026 12:00:07 GMT"}), now=now
    )
    assert slow is not None and slow.after_s == 7.0


@pytest.mark.parametrize(
    "error",
    [_status_error(500), _status_error(400, {"Retry-After": "1"}), ValueError("429"), KeyError()],
)
def test_other_errors_are_no_pushbacks(error: Exception) -> None:
    assert as_slow_down(error) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 0.25 ", 0.25),  # decimals, as some servers send them
        ("-4", 0.0),
        ("1e9", MAX_RETRY_AFTER_S),
        ("soon", None),
        ("", None),
        ("nan", None),
        (None, None),
        ("Thu, 01 Jan 2026 11:59:00 GMT", 0.0),  # a date past
    ],
)
def test_retry_after_values(value: str | None, seconds: float | None) -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_s(value, now=now) == seconds


def test_the_backoff_doubles_up_to_its_bound() -> None:
    assert [backoff_s(n) for n in range(3)] == [BACKOFF_S, 2 * BACKOFF_S, 4 * BACKOFF_S]
    assert backoff_s(50) == MAX_BACKOFF_S


# ---------------------------------------------------------------------------------------------
# Retries


def test_the_same_chunk_is_sent_again_after_each_delay(clock: FakeMonotonicClock) -> None:
    cap = PushbackCap(clock=clock, sleep=clock.sleep)
    _history(cap.control, clock, 1000)
    answers: list[Exception | None] = [
        _status_error(429, {"Retry-After": "2"}),
        SlowDown(),
        SlowDown(0.5),
        None,
    ]
    calls: list[float] = []

    def send() -> str:
        calls.append(clock() / 1e9)
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return "sent"

    assert send_with_retry(send, cap, lambda: 1000.0) == ("sent", 3, 2 + 2 * BACKOFF_S + 0.5)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(calls)]
    assert gaps == [2.0, 2 * BACKOFF_S, 0.5]  # the second retry backs off: no delay named
    # Lowered once: its retries are the same overload.
    assert cap.rate(1000.0) == pytest.approx(DECREASE * 1000)


def test_an_error_that_is_no_pushback_is_raised_at_once(clock: FakeMonotonicClock) -> None:
    cap = PushbackCap(clock=clock, sleep=clock.sleep)

    def send() -> None:
        raise _status_error(500)

    with pytest.raises(httpx.HTTPStatusError):
        send_with_retry(send, cap, lambda: 1000.0)
    assert clock() == FakeMonotonicClock().now_ns  # no wait
    assert cap.rate(1000.0) is None


# ---------------------------------------------------------------------------------------------
# The sink and the wrapper, on fake time


@pytest.fixture
def fake_cap(
    monkeypatch: pytest.MonkeyPatch,
    fake_buckets: FakeMonotonicClock,  # noqa: F811 (the fixture imported above)
) -> PushbackCap:
    """The pushback cap of namespace t/ns, on the fake clock; no SparkSession to check."""
    monkeypatch.setattr("rgspark._throttled.active_session", lambda: None)
    cap = PushbackCap(clock=fake_buckets, sleep=fake_buckets.sleep)
    for kind in ("publish", "dispatch"):
        monkeypatch.setitem(_pushback._caps, ("http://127.0.0.1:1", "t", "ns", kind), cap)
    return cap


def local_client(clock: FakeMonotonicClock, rate: float) -> LocalClient:
    quota = NamespaceQuota("t", "ns", sleep=clock.sleep)
    quota.apply({"publishMsgs": rate})
    return LocalClient(quota)


class Destination:
    """Takes at most `limit` rows per fake second (a window from each second's start),
    answering 429 with the time to the next second; records every row it took."""

    def __init__(self, clock: FakeMonotonicClock, limit: int) -> None:
        self.clock = clock
        self.limit = limit
        self.rows: list[Any] = []
        self.refused = 0
        self._second = -1
        self._taken = 0

    def send(self, chunk: list[Any]) -> None:
        now = self.clock() / 1e9
        second = int(now)
        if second != self._second:
            self._second, self._taken = second, 0
        if self._taken + len(chunk) > self.limit:
            self.refused += 1
            raise _status_error(429, {"Retry-After": f"{second + 1 - now:.6f}"})
        self._taken += len(chunk)
        self.rows.extend(chunk)


def test_a_sink_loses_and_repeats_no_row_and_settles_under_the_destinations_limit(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    destination = Destination(clock, limit=400)
    rows = list(range(12_000))
    start = clock()
    throttled_sink(local_client(clock, 1000.0), "publish", destination.send)(iter(rows))
    elapsed = (clock() - start) / 1e9

    assert destination.rows == rows  # every row once, in order
    assert destination.refused > 0
    # The allocation (1000/s) would take 12 s; the destination's 400/s, 30 s. The cap keeps
    # the sink close to the destination's limit, its pushbacks costing little.
    assert 30 <= elapsed <= 30 / 0.8
    rate = fake_cap.rate(1000.0)
    assert rate is not None and rate < 1000.0


def test_a_sink_without_pushback_runs_at_the_allocation(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    sent: list[int] = []
    start = clock()
    throttled_sink(local_client(clock, 1000.0), "publish", lambda chunk: sent.extend(chunk))(
        iter(range(5000))
    )
    assert sent == list(range(5000))
    assert (clock() - start) / 1e9 == pytest.approx(5.0, rel=0.05)
    assert fake_cap.rate(1000.0) is None


def test_a_sinks_other_errors_fail_the_task(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    def send(chunk: list[int]) -> None:
        raise _status_error(500)

    with pytest.raises(httpx.HTTPStatusError):
        throttled_sink(local_client(clock, 1000.0), "publish", send)(iter(range(10)))


def test_a_function_fed_batches_gets_the_batch_it_pushed_back_again(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    sent: list[int] = []
    refused = {3: 2, 7: 1}  # batch -> times pushed back

    def post(batches: Iterator[pa.RecordBatch]) -> Iterator[int]:
        for batch in batches:
            first = batch.column(0)[0].as_py()
            if refused.get(first // 10, 0):
                refused[first // 10] -= 1
                raise SlowDown(0.5)
            sent.extend(batch.column(0).to_pylist())
            yield batch.num_rows

    batches = [pa.record_batch({"id": list(range(i * 10, i * 10 + 10))}) for i in range(10)]
    wrapped = throttled(post, local_client(clock, 1000.0))
    start = clock()
    assert sum(wrapped(iter(batches))) == 100
    assert sent == list(range(100))  # every row once, in order
    assert (clock() - start) / 1e9 >= 3 * 0.5  # each delay waited
    assert fake_cap.rate(1000.0) is not None  # lowered


def test_a_partition_function_fed_batches_is_called_again(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    sent: list[int] = []
    calls = []
    refuse = [True, False]

    def post(batches: Iterator[pa.RecordBatch]) -> None:  # foreachPartition-like
        calls.append(1)
        for batch in batches:
            if batch.column(0)[0].as_py() == 20 and refuse.pop(0):
                raise _status_error(503, {"Retry-After": "1"})
            sent.extend(batch.column(0).to_pylist())

    batches = [pa.record_batch({"id": list(range(i * 10, i * 10 + 10))}) for i in range(5)]
    throttled(post, local_client(clock, 1000.0))(iter(batches))
    assert sent == list(range(50))
    assert len(calls) == 2


def test_a_function_called_per_batch_is_called_again(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    import pandas as pd

    answers = [SlowDown(0.25), None]

    def post(pdf: pd.DataFrame) -> pd.DataFrame:
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return pdf

    frame = pd.DataFrame({"id": range(10)})
    assert throttled(post, local_client(clock, 1000.0))(frame) is frame
    assert answers == []


def test_a_function_fed_rows_cannot_retry_and_says_so(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    def post(rows: Iterator[int]) -> None:
        gathered = list(rows)  # sent in one call: rgspark cannot tell what went
        raise SlowDown(1.0, f"{len(gathered)} rows refused")

    with pytest.raises(PushbackNotRetriedError, match="throttled_sink") as raised:
        throttled(post, local_client(clock, 1000.0))(iter(range(100)))
    assert isinstance(raised.value.__cause__, SlowDown)


def test_a_pushback_after_the_last_batch_cannot_retry(
    fake_cap: PushbackCap, clock: FakeMonotonicClock
) -> None:
    def post(batches: Iterator[pa.RecordBatch]) -> None:
        for _ in batches:
            pass
        raise SlowDown()

    with pytest.raises(PushbackNotRetriedError):
        throttled(post, local_client(clock, 1000.0))(iter([pa.record_batch({"x": [1]})]))


# ---------------------------------------------------------------------------------------------
# Figures


def test_figures_count_pushbacks_and_their_seconds() -> None:
    figures = Figures.of("a", [10, 100, 0.5, 1.0, 2.0, 2, 1.5])
    figures.merge(Figures.of("a", [5, 50, 0.25, 0.5, 3.0, 1, 0.5]))
    assert (figures.pushbacks, figures.pushback_s) == (3, 2.0)
    assert figures.last() == ActionStats(15, 150, 2.5, 0.75)
    assert figures.actions["a"][5:] == [3, 2.0]


def test_figures_of_an_entry_without_pushbacks_have_none() -> None:
    figures = Figures.of("a", [10, 100, 0.5, 1.0, 2.0])  # as an older worker counts
    assert (figures.pushbacks, figures.pushback_s) == (0, 0.0)
    entry = [10.0, 100.0, 0.5, 1.0, 2.0]
    add_entry(entry, [1, 1, 0.0, 0.5, 2.5, 4, 1.0])
    assert entry == [11, 101, 0.5, 0.5, 2.5, 4, 1.0]


def test_figures_pickled_without_pushbacks_read_none() -> None:
    # What an rgspark without them sends from a worker: its slots' state lacks the two.
    figures = Figures()
    state = {"rows": 3, "bytes": 30, "held_s": 0.0, "actions": {}}
    figures.__setstate__((None, state))
    assert (figures.rows, figures.pushbacks, figures.pushback_s) == (3, 0, 0.0)


def test_a_cap_above_a_fallen_allocation_holds_nothing_but_is_kept(
    clock: FakeMonotonicClock,
) -> None:
    control = AimdRate(clock=clock)
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    clock.advance(0.1)
    control.sent(10)
    assert control.rate(300.0) is None  # the group's allocation fell under the cap: it holds
    assert control.rate(1000.0) is not None  # the allocation back up: the cap holds again
    # Pushed back at the allocation, it falls from the allocation: that was the rate refused.
    clock.advance(RECOVERY_S)
    assert control.pushed_back(300.0) == pytest.approx(DECREASE * 300)
    # From what went through, when less: the destination took no more.
    control = AimdRate(clock=clock)
    _history(control, clock, 200)
    assert control.pushed_back(1000.0) == pytest.approx(DECREASE * 200)


def test_what_the_destination_takes_is_the_rate_pushed_back_or_the_risen_cap(
    clock: FakeMonotonicClock,
) -> None:
    control = AimdRate(clock=clock)
    assert control.usable(1.0) is None  # no cap: the destination took everything
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    # Below the rate pushed back, the cap probes towards it: that rate is the most known.
    assert control.usable(1.0) == pytest.approx(1000.0)
    for _ in range(30):  # three seconds of sends: GOOD, then beyond the rate pushed back
        clock.advance(0.1)
        control.sent(10)
    risen = control.rate()
    assert risen is not None and risen > 1000.0
    assert control.usable(0.5) == pytest.approx(risen + _pace(3.0) * 1000 * 0.5)


# ---------------------------------------------------------------------------------------------
# Demand: what the group hears of a worker that is pushed back


def _sending(quota: NamespaceQuota, clock: FakeMonotonicClock, seconds: float) -> None:
    """50 rows every 0.1 s (500/s, under the allocation) for `seconds`."""
    for _ in range(round(seconds * 10)):
        clock.advance(0.1)
        quota.acquire("publish", 50, 0)


def test_a_retrys_delay_counts_as_held_back_and_keeps_the_demand(
    clock: FakeMonotonicClock,
) -> None:
    quota = NamespaceQuota("t", "ns", sleep=clock.sleep, clock=clock)
    quota.apply({"publishMsgs": 1000.0})
    cap = PushbackCap(clock=clock, sleep=clock.sleep)
    _sending(quota, clock, 2)
    held_retry(quota, "publish", cap)(1.0)
    # Held, the worker still wants what it was sending; idle, it would read 0.
    assert quota.usage()["publishMsgs"]["demand"] >= 500


def _held(quota: NamespaceQuota, clock: FakeMonotonicClock, seconds: float) -> None:
    """300 msgs and 3,000 bytes every 0.1 s: 3,000 msgs/s wanted, over the allocation."""
    for _ in range(round(seconds * 10)):
        quota.acquire("publish", 300, 3000)
        clock.advance(0.1)


def test_under_a_cap_the_demand_reported_is_what_the_destination_takes(
    clock: FakeMonotonicClock,
) -> None:
    quota = NamespaceQuota("t", "ns", sleep=clock.sleep, clock=clock)
    quota.apply({"publishMsgs": 2000.0})
    _held(quota, clock, 1)
    held = quota.usage()["publishMsgs"]["demand"]
    assert held > 2500  # held back: all it could send

    control = AimdRate(clock=clock)
    quota.bound_demand("publish", control.usable)
    _history(control, clock, 1000)
    control.pushed_back(1000.0)
    _held(quota, clock, 1)
    figures = quota.usage(interval_s=1.0)
    assert figures["publishMsgs"]["demand"] == pytest.approx(1000.0)
    # Its bytes alike: 10 bytes a msg.
    assert figures["publishBytes"]["demand"] == pytest.approx(10_000.0)
    # Still held back as much, it has not moved: no report before its time.
    _held(quota, clock, 0.5)
    assert not quota.demand_moved(interval_s=1.0)


def test_the_caps_waits_do_not_raise_the_demand(
    monkeypatch: pytest.MonkeyPatch, clock: FakeMonotonicClock
) -> None:
    monkeypatch.setattr("rgspark._spark.active_session", lambda: None)
    quota = NamespaceQuota("t", "ns", sleep=clock.sleep, clock=clock)
    quota.apply({"publishMsgs": 1000.0})
    fake_cap = PushbackCap(clock=clock, sleep=clock.sleep)
    monkeypatch.setitem(_pushback._caps, ("http://127.0.0.1:1", "t", "ns", "publish"), fake_cap)
    _history(fake_cap.control, clock, 1000)
    fake_cap.pushed_back(1000.0)  # the cap: DECREASE of the allocation, and rising
    throttled_sink(LocalClient(quota), "publish", lambda chunk: None)(iter(range(800)))
    cap = fake_cap.rate(1000.0)
    assert cap is not None
    demand = quota.usage()["publishMsgs"]["demand"]
    # What the worker gets through at the cap, not what a held worker would be said to want.
    assert demand <= 1.1 * cap
    assert demand >= 0.8 * DECREASE * 1000
