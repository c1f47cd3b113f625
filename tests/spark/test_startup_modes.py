"""What workers do before their first allocation (``on_no_policy``), in real Spark jobs.

The server is away when the job's tasks start: stopped after `throttle` checked it
(``"fail"``), started during the job (``"block"``), or never there (safe rates). Rates are
timed from the rows, as in `test_throttle_spark`, with generous margins.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from app.db import upgrade_schema
from benchmarks.spark_throttle import logged
from rgspark import (
    AuthenticationError,
    PolicyUnavailableError,
    ResourceGroupClient,
    ServerUnreachableError,
    _client,
    throttle,
)
from rgspark._client import no_allocation
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.conftest import make_settings, serve
from tests.factories import running_app
from tests.spark.test_checks import closed_port_url
from tests.spark.test_throttle_spark import bounded, logged_stamps, rate_between, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.conftest import RGServer

spark_job = pytest.mark.spark
# The rates measured, for a reader of the run (``--log-cli-level=INFO``).
logger = logging.getLogger(__name__)

STARTUP_S = 2.0  # the "fail" job's startup timeout
DOWN_S = 3.0  # how long the "block" job runs before its server starts
RATE = 1000  # msgs/s: the group's, for "block"
SAFE_RATE = 400  # msgs/s: each worker's safe rate
REL = 0.3  # tolerance on a rate timed over a few seconds


def troubleshooting_line() -> str:
    """The line the Troubleshooting page quotes for a worker that got no allocation."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    text = " ".join(page.split())
    [quoted] = re.findall(r"`(rgspark\.PolicyUnavailableError: [^`]*)`", text)
    return str(quoted)


def failure_line(url: str, names: str, startup_s: str) -> re.Pattern[str]:
    """The Troubleshooting page's line for `url`, `names` (tenant/namespace) and `startup_s`,
    its "..." (the cause) any text: a pattern of a whole line."""
    template = troubleshooting_line()
    template = template.replace("http://127.0.0.1:8080", url).replace("team-a/ingest", names)
    template = template.replace("after 30 s", f"after {startup_s} s")
    before, after = template.split(" ... ")
    return re.compile(f"^{re.escape(before)} (?P<cause>.+) {re.escape(after)}$", re.MULTILINE)


def test_troubleshooting_quotes_the_line_a_worker_raises_after_the_startup_timeout() -> None:
    client = ResourceGroupClient("http://127.0.0.1:8080", tenant="team-a", namespace="ingest")
    cause = ServerUnreachableError("The admin server at http://127.0.0.1:8080 did not answer")

    raised = no_allocation(client, cause)

    line = f"rgspark.{type(raised).__name__}: {raised}"
    found = failure_line("http://127.0.0.1:8080", "team-a/ingest", "30").fullmatch(line)
    assert found is not None, (line, troubleshooting_line())
    assert found["cause"] == f"{cause}."
    # A fraction of a second is said as it was set, not rounded to a whole second.
    short = ResourceGroupClient(client.url, tenant="t", namespace="ns", startup_timeout_s=2.5)
    assert " after 2.5 s: " in str(no_allocation(short, cause))


class FakeTime:
    """`time.monotonic` and `time.sleep` for `rgspark._client`: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def closed_client(**options: Any) -> ResourceGroupClient:
    """A client of a server that is not there."""
    return ResourceGroupClient(closed_port_url(), tenant="t", namespace="ns", **options)


def first_report(
    client: ResourceGroupClient,
    monkeypatch: pytest.MonkeyPatch,
    tries: list[float],
    failures: list[Exception] | None = None,
) -> None:
    """Run a worker's first report on fake time, noting in `tries` when each try was made.

    Each try is a real report to the client's server, unless `failures` is given: then the
    tries raise those, in turn, and the one after them succeeds."""
    clock = FakeTime()
    monkeypatch.setattr(_client, "time", clock)
    reporter = Reporter(client.admin(), [NamespaceQuota(client.tenant, client.namespace)])
    real = reporter.run_once

    def run_once() -> float:
        tries.append(clock.now)
        if failures:
            raise failures.pop(0)
        return real() if failures is None else 1.0

    monkeypatch.setattr(reporter, "run_once", run_once)
    try:
        _client._first_report(reporter, client, forever=client.on_no_policy == "block")
    finally:
        reporter.admin.close()


def test_fail_retries_until_the_startup_timeout_and_raises_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = closed_client(startup_timeout_s=5)
    tries: list[float] = []
    with pytest.raises(PolicyUnavailableError, match="after 5 s: The admin server at"):
        first_report(client, monkeypatch, tries)
    # Backing off from half a second, the last try at the timeout, not before it.
    assert tries == [0, 0.5, 1.5, 3.5, 5.0]


def test_block_retries_at_most_10_s_apart_until_the_server_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = closed_client(on_no_policy="block")
    down: list[Exception] = [ServerUnreachableError("refused") for _ in range(7)]
    tries: list[float] = []
    first_report(client, monkeypatch, tries, down)
    assert tries == [0, 0.5, 1.5, 3.5, 7.5, 15.5, 25.5, 35.5]


def test_block_fails_at_once_on_what_waiting_cannot_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    client = closed_client(on_no_policy="block")
    tries: list[float] = []
    with pytest.raises(AuthenticationError):
        first_report(client, monkeypatch, tries, [AuthenticationError("401", status_code=401)])
    assert tries == [0]


@spark_job
def test_fail_fails_the_task_after_the_startup_timeout_in_one_documented_line(
    spark: SparkSession, own_server: tuple[RGServer, ExitStack]
) -> None:
    server, stack = own_server
    job = server.namespace(publishRateInMsgs=RATE)
    client = job.client(startup_timeout_s=STARTUP_S)  # "fail" is the default
    df = throttle(spark.range(100, numPartitions=1), client, "publish")  # the check passes
    stack.close()  # the server goes before any task starts

    start = time.monotonic()
    with pytest.raises(Exception) as failed:  # PySpark's class differs between versions
        bounded(spark, df.count, timeout_s=60)
    elapsed = time.monotonic() - start
    logger.info("fail: the action failed after %.1f s (startup timeout %g s)", elapsed, STARTUP_S)

    found = failure_line(server.url, f"{job.tenant}/{job.namespace}", "2").search(str(failed.value))
    assert found is not None, str(failed.value)[-3000:]
    assert found["cause"].startswith(f"The admin server at {server.url} did not answer: ")
    # The task retried for the whole timeout, and gave up soon after it.
    assert STARTUP_S <= elapsed <= STARTUP_S + 30, elapsed


@spark_job
def test_block_waits_for_the_server_then_runs_at_the_groups_rate(
    spark: SparkSession, own_server: tuple[RGServer, ExitStack], tmp_path: Path
) -> None:
    server, stack = own_server
    job = server.namespace(publishRateInMsgs=RATE)
    stack.close()  # down before the job starts; its database stays
    rows = 4 * RATE
    client = job.client(on_no_policy="block")
    # One task: the group's rate is its own, timed over its one log (two tasks' logs need
    # not overlap in time, and then no window is common to them).
    df = logged(throttle(spark.range(rows, numPartitions=1), client, "publish"), tmp_path)

    with ThreadPoolExecutor(1) as pool:
        action = pool.submit(run, df)
        time.sleep(DOWN_S)
        assert not action.done(), action.exception()
        assert logged_stamps(tmp_path) == []  # no row went through without the server
        starting = time.time()
        with restarted(server, tmp_path / "own-server"):
            action.result(timeout=120)

    stamps = logged_stamps(tmp_path)
    assert len(stamps) == rows
    assert stamps[0] > starting
    rate = rate_between(stamps, *steady_window(sorted(tmp_path.glob("*.log"))))
    logger.info("block: %.0f msgs/s once the server came up (group rate %d)", rate, RATE)
    assert (1 - REL) * RATE <= rate <= (1 + REL) * RATE, rate


@contextmanager
def restarted(server: RGServer, directory: Path) -> Iterator[None]:
    """`server` again, on its port and database (in `directory`), with its keys."""
    database_url = f"sqlite:///{directory / 'rg.db'}"
    upgrade_schema(database_url)
    settings = make_settings(
        database_url,
        server.secret_key,
        report_interval_seconds=server.report_interval_s,
        usage_history_resolution_seconds=1.0,
    )
    with (
        running_app(settings) as app,
        serve(app, port=urlsplit(server.url).port),
    ):
        yield


@spark_job
def test_safe_rates_hold_each_worker_while_the_server_is_away(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = ResourceGroupClient(
        closed_port_url(),
        tenant="t",
        namespace="ns",
        on_no_policy={"publishMsgs": SAFE_RATE},
        timeout_s=5,
    )
    rows = 8 * SAFE_RATE  # two tasks at once, four seconds each
    df = logged(throttle(spark.range(rows, numPartitions=2), client, "publish"), tmp_path)

    bounded(spark, lambda: run(df))

    # One log per worker process after `throttle`, so one per task: each held to the rate.
    logs = sorted(tmp_path.glob("*.log"))
    assert len(logs) == 2
    for log in logs:
        stamps = logged_stamps_of(log)
        rate = rate_between(stamps, *steady_window([log]))
        logger.info("safe rates: %.0f msgs/s in a worker (safe rate %d)", rate, SAFE_RATE)
        assert len(stamps) == rows // 2
        assert (1 - REL) * SAFE_RATE <= rate <= (1 + REL) * SAFE_RATE, rate


def logged_stamps_of(log: Path) -> list[float]:
    stamps = []
    for line in log.read_text().splitlines():
        t, count = line.split()
        stamps += [float(t)] * int(count)
    return stamps


def steady_window(logs: list[Path]) -> tuple[float, float]:
    """The moments between which rows reached the operator after `throttle` as `throttle`
    let them go, in every task (one log each): after each task's first batch and before
    its last. A worker's output waits for its buffer to fill, so the first batch comes late
    with all the rows let go meanwhile, and the last comes when its task ends, with the
    rest; in between, a batch comes each time a buffer's worth went."""
    times = [sorted(set(logged_stamps_of(log))) for log in logs]
    assert all(len(t) >= 3 for t in times), "too few batches to time a rate"
    return max(t[0] for t in times), min(t[-2] for t in times)
