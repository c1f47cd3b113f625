"""A finished application frees its workers' shares at once; a worker killed on its own is
freed when its lease and grace run out.

Each job runs as its own driver under ``spark-submit`` (the test session's Spark cannot be
stopped before the session ends), against a server of the test's own whose report interval
(2 s) keeps every reporter alive for 6 s at least after its last report: what is gone within
a second was released, not expired. The server's reporters are read from its database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from app.models import QuotaReporter
from rgspark import ResourceGroupClient
from rgspark._release import release_job
from rgspark.wire import job_of
from tests.spark.conftest import RGServer, running_server
from tests.spark.submit import submit
from tests.spark.test_checks import closed_port_url

spark_job = pytest.mark.spark

INTERVAL_S = 2.0
RATE = 2000  # msgs/s: the job's 2000 rows take about a second
RELEASED_WITHIN_S = 1.0
POLL_S = 0.05

# The driver: a throttled job, then its workers' pids (each of those workers holds a
# reporter: `client.quota` started one there), then, once the test says "proceed", what
# `END` says: "exit", "stop" (and go on until the test says "end") or "wait" (until then).
# Markers go to a file, timestamped; the test's words are files in the same folder.
DRIVER = """
import json
import os
import sys
import time

from pyspark.sql import SparkSession
from rgspark import ResourceGroupClient, throttle

url, tenant, namespace, token, end, folder = sys.argv[1:7]


def mark(**fields):
    with open(os.path.join(folder, "markers.jsonl"), "a") as out:
        out.write(json.dumps({**fields, "at": time.time()}) + "\\n")


def wait_for(word):
    while not os.path.exists(os.path.join(folder, word)):
        time.sleep(0.02)


spark = SparkSession.builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
client = ResourceGroupClient(url, tenant=tenant, namespace=namespace, token=token)
df = spark.range(2000, numPartitions=2)
throttle(df, client, "publish").write.format("noop").mode("overwrite").save()


def pid(_):
    client.quota("publish")
    yield os.getpid()


pids = spark.sparkContext.parallelize(range(2), 2).mapPartitions(pid).collect()
mark(job=client.job, pids=pids)
wait_for("proceed")
if end == "stop":
    spark.stop()
    mark(stopped=True)
if end != "exit":
    wait_for("end")
mark(ending=True)
"""


class Driver:
    """A driver run by ``spark-submit`` in a thread of the test, and what it says."""

    def __init__(self, rg: RGServer, folder: Path, end: str) -> None:
        job = rg.namespace(publishRateInMsgs=RATE)
        script = folder / "driver.py"
        script.write_text(DRIVER)
        self.folder = folder
        self.result: list[subprocess.CompletedProcess[str]] = []
        self.ended_at: float | None = None
        args = [
            *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
            *("--conf", f"spark.pyspark.python={sys.executable}"),
            *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
            str(script),
            *(rg.url, job.tenant, job.namespace, job.token, end, str(folder)),
        ]
        self.thread = threading.Thread(target=self._run, args=(args,), daemon=True)
        self.thread.start()

    def _run(self, args: list[str]) -> None:
        self.result.append(submit(args, cwd=self.folder))
        self.ended_at = time.time()

    def say(self, word: str) -> None:
        (self.folder / word).touch()

    def marker(self, key: str, timeout_s: float = 150) -> dict[str, Any]:
        """The first marker holding `key`, once the driver wrote it."""
        markers = self.folder / "markers.jsonl"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = markers.read_text().splitlines() if markers.exists() else []
            for found in map(json.loads, lines):
                if key in found:
                    return dict(found)
            if not self.thread.is_alive():
                break
            time.sleep(POLL_S)
        raise AssertionError(f"the driver wrote no {key!r} marker: {self.output()}")

    def finish(self) -> subprocess.CompletedProcess[str]:
        self.say("end")
        self.thread.join(timeout=120)
        assert self.result, "the driver did not end"
        assert self.result[0].returncode == 0, self.output()
        return self.result[0]

    def output(self) -> str:
        if not self.result:
            return "(still running)"
        return self.result[0].stdout[-3000:] + self.result[0].stderr[-3000:]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[RGServer, Path]]:
    """A server of the test's own, and its SQLite database (`running_server` keeps it as
    ``rg.db`` in the folder it is given)."""
    directory = tmp_path / "server"
    with running_server(directory, report_interval_s=INTERVAL_S) as (rg, _):
        yield rg, directory / "rg.db"


def leases(database: Path, job: str) -> dict[str, float]:
    """The job's reporters on the server now, each with the end of its lease and grace."""
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(QuotaReporter.reporter_id, QuotaReporter.lease_until))
            return {
                reporter: until.replace(tzinfo=UTC).timestamp()
                for reporter, until in rows
                if job_of(reporter) == job
            }
    finally:
        engine.dispose()


def watch(
    database: Path, job: str, until: Callable[[dict[str, float]], bool], timeout_s: float
) -> tuple[float, dict[str, float]]:
    """Read the job's reporters every `POLL_S` until `until` holds of them: when it did,
    and every reporter seen meanwhile with the latest end of its lease seen."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        now = leases(database, job)
        seen.update(now)
        if until(now):
            return time.time(), seen
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout_s} s the job's reporters were {now}")
        time.sleep(POLL_S)


def assert_released_not_expired(gone_at: float, seen: dict[str, float]) -> None:
    """The reporters went while their leases still ran: released, not expired."""
    assert len(seen) >= 2, seen
    assert min(seen.values()) > gone_at + RELEASED_WITHIN_S, (gone_at, seen)


def running(database: Path, driver: Driver) -> tuple[str, dict[str, Any]]:
    """The job's id and its first marker, once the server counts its workers."""
    started = driver.marker("job")
    watch(database, started["job"], lambda now: len(now) >= 2, timeout_s=10)
    return started["job"], started


@spark_job
@pytest.mark.parametrize("end", ["exit", "stop"])
def test_an_application_that_ends_frees_its_workers_shares_at_once(
    server: tuple[RGServer, Path], tmp_path: Path, end: str
) -> None:
    """The driver process exits, or its session stops while the process goes on."""
    rg, database = server
    driver = Driver(rg, tmp_path, end)
    job, _ = running(database, driver)

    driver.say("proceed")
    gone_at, seen = watch(database, job, lambda now: not now, timeout_s=60)

    if end == "stop":
        assert driver.thread.is_alive()  # the stop freed them: the driver has not ended yet
        ended_at = driver.marker("stopped")["at"]
        driver.finish()
    else:
        driver.finish()
        assert driver.ended_at is not None
        ended_at = driver.ended_at
    assert gone_at <= ended_at + RELEASED_WITHIN_S, (ended_at, gone_at)
    assert_released_not_expired(gone_at, seen)
    time.sleep(2 * INTERVAL_S)  # none came back: no worker outlived the release
    assert leases(database, job) == {}


@spark_job
def test_a_worker_killed_on_its_own_is_freed_when_its_lease_runs_out(
    server: tuple[RGServer, Path], tmp_path: Path
) -> None:
    rg, database = server
    driver = Driver(rg, tmp_path, "wait")
    job, started = running(database, driver)
    before = set(leases(database, job))
    victim = started["pids"][0]
    assert b"pyspark" in Path(f"/proc/{victim}/cmdline").read_bytes()

    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    gone_at, seen = watch(database, job, lambda now: len(now) < len(before), timeout_s=20)

    [gone] = before - set(leases(database, job))
    lease_end = seen[gone]  # the last end of its lease and grace that the server had
    assert gone_at - killed_at > 1.5, "freed at once, as a release would be"
    assert lease_end - 0.3 <= gone_at <= lease_end + 2.0, (killed_at, lease_end, gone_at)
    assert set(leases(database, job)) == before - {gone}  # the others live on
    driver.say("proceed")
    driver.finish()


def test_a_release_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    # At exit above all: the server away costs one line and the leases, nothing more.
    client = ResourceGroupClient(closed_port_url(), tenant="t", namespace="ns")
    release_job(client, client.job)
    [record] = [r for r in caplog.records if r.name == "rgspark"]
    assert record.levelname == "WARNING"
    assert f"could not release the workers of job {client.job} at once" in record.message
    assert "when their leases run out" in record.message
