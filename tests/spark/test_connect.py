"""rgspark on Spark Connect sessions (PySpark 4), as Databricks shared clusters and Spark 4
deployments run PySpark: the driver's Python is a client of a Spark Connect server.

A Connect client cannot share a process with the classic `spark` fixture: PySpark refuses a
Connect session once a SparkContext runs, and a Connect session switches the whole process's
``pyspark.sql`` functions to Connect's. So each job here is a driver process of its own
(`drive`), a client of one Connect server for the module (`connect_url`), with markers on
stdout; executors that cannot work get a ``remote("local[2]")`` session of their own, whose
server runs in the driver's process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest

from tests.conftest import SUPERUSER
from tests.spark.submit import (
    PASSED_ON,
    clean_site,
    python_without_site,
    spark_home,
    traceback_of,
)
from tests.spark.test_checks import assert_one_line
from tests.spark.test_throttle_spark import REL, logged_stamps, rate_between

if TYPE_CHECKING:
    from tests.spark.conftest import JobNamespace, RGServer

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        int(pyspark.__version__.split(".")[0]) < 4,
        reason="rgspark supports Spark Connect sessions from PySpark 4 on; 3.5 runs the classic "
        "path only",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RATE = 2000  # msgs/s
# What every driver starts with: its arguments as JSON, a Connect session, and `say`, which
# writes a marker line.
PREAMBLE = """
import json
import sys

from pyspark.sql import SparkSession
from rgspark import ResourceGroupClient, RGSparkError, throttle, throttled_sink

args = json.loads(sys.argv[1])
spark = SparkSession.builder.remote(args["remote"]).getOrCreate()


def say(**marker):
    print(json.dumps(marker), flush=True)


def error(exc):
    return f"{type(exc).__name__}: {exc}"


def client(**options):
    names = {"tenant": args["tenant"], "namespace": args["namespace"], "token": args["token"]}
    return ResourceGroupClient(args["url"], **{**names, **options})


def noop(df):
    df.write.format("noop").mode("overwrite").save()
"""


@dataclass
class Driven:
    """What a driver process said: its markers, merged, and all it wrote."""

    markers: dict[str, Any]
    returncode: int
    output: str

    def traceback(self) -> list[str]:
        return traceback_of(self.output)


def drive(
    script: str,
    remote: str,
    job: JobNamespace,
    tmp_path: Path,
    env: dict[str, str] | None = None,
    **args: Any,
) -> Driven:
    """`PREAMBLE` and `script` run by this interpreter in a process of its own, a client of
    `remote`, with `job`'s names and token and `args` in ``args``."""
    path = tmp_path / "driver.py"
    path.write_text(PREAMBLE + script)
    names = {"url": job.server.url, "tenant": job.tenant, "namespace": job.namespace}
    given = {"remote": remote, **names, "token": job.token, **args}
    base = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    completed = subprocess.run(
        [sys.executable, str(path), json.dumps(given)],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = completed.stdout + completed.stderr
    markers: dict[str, Any] = {}
    for line in completed.stdout.splitlines():
        if line.startswith("{"):
            markers.update(json.loads(line))
    return Driven(markers, completed.returncode, output)


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on two local cores, its workers running this interpreter, set
    up as the classic `spark` fixture is (small Arrow batches and worker buffers, so that rows
    are timed within milliseconds of `throttle` releasing them): its ``sc://`` URL."""
    log = tmp_path_factory.mktemp("connect-server") / "server.log"
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",  # any free port: it says which in its log
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
        "spark.buffer.size": "1024",
        "spark.driver.memory": "1g",
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
        *("--master", "local[2]"),
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        "spark-internal",
    ]
    base = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    # A Connect server's Python workers run its PYSPARK_PYTHON (spark.pyspark.python is not
    # read there).
    env = {**base, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable}
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"sc://{started_at(log, server)}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def started_at(log: Path, server: subprocess.Popen[bytes], timeout_s: float = 180) -> str:
    """The ``host:port`` the server says it listens on, once it says so."""
    marker = "Spark Connect server started at: "
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if marker in line:
                return line.split(marker, 1)[1].strip()
        assert server.poll() is None, log.read_text()[-5000:]
        time.sleep(0.2)
    raise AssertionError(f"no Connect server after {timeout_s} s: {log.read_text()[-5000:]}")


# ---------------------------------------------------------------------------------------------
# The check


CHECK = """
say(policy=client().check(spark))
for name, options in [
    ("token", {"token": "not-a-token"}),
    ("namespace", {"namespace": "missing", "token": args["superuser"]}),
]:
    try:
        throttle(spark.range(10), client(**options), "publish")  # the executors' half alone
    except RGSparkError as exc:
        say(**{name: error(exc)})
throttle(spark.range(10), client(token="not-a-token"), "publish")  # what the user sees
"""


def test_check_on_a_connect_session_passes_and_fails_in_one_line(
    connect_url: str, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)

    driven = drive(CHECK, connect_url, job, tmp_path, superuser=rg_server.token(SUPERUSER))

    assert driven.returncode == 1, driven.output[-5000:]
    found = driven.markers
    assert found["policy"]["resourceGroup"] == job.group
    assert found["policy"]["limits"]["publishRateInMsgs"] == RATE
    assert found["token"].startswith(
        f"AuthenticationError: The admin server at {rg_server.url} rejected the job's token "
        "from the executors (on "
    )
    assert found["namespace"].startswith(
        f"NamespaceNotFoundError: The namespace {job.tenant}/missing does not exist at "
        f"{rg_server.url} from the executors (on "
    )
    assert_one_line(f"rgspark.{found['token']}", driven.output, driven.traceback())
    assert "JVM_ATTRIBUTE_NOT_SUPPORTED" not in driven.output


# Executors that cannot work, each in a Connect server of their own: the check's job fails, or
# its probe, shipped by value, runs where rgspark cannot be imported and says so.
BROKEN = """
try:
    client().check(spark)
except RGSparkError as exc:
    say(check=error(exc))
noop(throttle(spark.range(1000, numPartitions=2), client(), "publish"))
say(written=True)
"""


@pytest.mark.parametrize("executors", ["without rgspark", "without a Python"])
def test_connect_executors_that_cannot_work_fail_in_one_line(
    executors: str, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    if executors == "without rgspark":
        # The driver has rgspark; the executors' Python has PySpark, PyArrow and httpx only.
        site = clean_site(tmp_path / "site")
        python = python_without_site(tmp_path / "python")
        env = {"PYSPARK_PYTHON": str(python), "PYTHONPATH": str(site)}
        expected = (
            "ConfigurationError: rgspark cannot be imported on the executors "
            f"(ModuleNotFoundError: No module named 'rgspark'; Python {python_version(3)} at "
            f"{sys.executable} on "
        )
    else:
        env = {"PYSPARK_PYTHON": "/nonexistent/python3"}
        expected = (
            "ConfigurationError: The executors cannot run Python tasks (java.io.IOException: "
            'Cannot run program "/nonexistent/python3"'
        )

    driven = drive(BROKEN, "local[2]", job, tmp_path, env=env)

    assert driven.returncode == 1, driven.output[-5000:]
    error = driven.markers["check"]
    assert error.startswith(expected), error
    assert "set spark.pyspark.python (or PYSPARK_PYTHON" in error
    assert "written" not in driven.markers  # throttle said the same before any data moved
    traceback = driven.traceback()
    assert traceback[-1] == f"rgspark.{error}"
    assert len(traceback) <= 20, "\n".join(traceback)


def python_version(parts: int) -> str:
    return ".".join(map(str, sys.version_info[:parts]))


# ---------------------------------------------------------------------------------------------
# The helpers' flows


THROTTLE = """
from pathlib import Path

from benchmarks.spark_throttle import logged

# The workers, and the namespace's runtime in them, started before the timed job, by a
# client of its own.
noop(logged(throttle(spark.range(100, numPartitions=2), client(), "publish"), None))
timed = client()
df = throttle(spark.range(args["rows"], numPartitions=2), timed, "publish")
noop(logged(df, Path(args["flow"])))
stats = timed.stats["publish"]
say(rows=stats.rows, bytes=stats.bytes, held=stats.task_throttled_s, last=list(stats.last))
"""


def test_throttle_holds_a_connect_batch_job_to_the_groups_rate(
    connect_url: str, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    rows = 10 * RATE
    flow = tmp_path / "flow"
    flow.mkdir()

    driven = drive(THROTTLE, connect_url, job, tmp_path, rows=rows, flow=str(flow))

    assert driven.returncode == 0, driven.output[-5000:]
    stamps = logged_stamps(flow)
    assert len(stamps) == rows
    # Past the first half second, while the two tasks start and claim their shares.
    assert rate_between(stamps, stamps[0] + 0.5, stamps[-1]) == pytest.approx(RATE, rel=0.05)
    # The figures, counted on the admin server, as on a classic session.
    figures = driven.markers
    assert figures["rows"] == rows
    assert figures["bytes"] >= 8 * rows  # a column of longs, in Arrow
    assert figures["held"] > 0
    last_rows, last_bytes, wall_s, held_s = figures["last"]
    assert (last_rows, last_bytes, held_s) == (rows, figures["bytes"], figures["held"])
    assert wall_s == pytest.approx(stamps[-1] - stamps[0], abs=0.5)


SINK = """
import os
import time
from pathlib import Path

from rgspark import ThrottledReader

sent_log, read_log = Path(args["sent"]), Path(args["read"])


def send(chunk):
    with (sent_log / f"{os.getpid()}.log").open("a") as log:
        log.write(f"{time.time()} {len(chunk)}\\n")


sender = client()
try:
    throttled_sink(client(token="not-a-token"), "publish", send)
except RGSparkError as exc:
    say(rejected=error(exc))
spark.range(10, numPartitions=2).foreachPartition(throttled_sink(client(), "publish", len))
spark.range(args["rows"], numPartitions=2).foreachPartition(throttled_sink(sender, "publish", send))
say(sink_rows=sender.stats["publish"].rows, sink_last=list(sender.stats["publish"].last))

reads = client()


def read(rows):
    reader = ThrottledReader(reads, "dispatch")
    for _ in rows:
        reader.read(lambda: b"x" * 1000)
        with (read_log / f"{os.getpid()}.log").open("a") as log:
            log.write(f"{time.time()} 1000\\n")


spark.range(args["reads"], numPartitions=2).foreachPartition(read)
"""


def test_throttled_sink_and_reader_hold_the_rate_on_connect(
    connect_url: str, rg_server: RGServer, tmp_path: Path
) -> None:
    read_rate = 20_000  # bytes/s
    job = rg_server.namespace(publishRateInMsgs=RATE, dispatchRateInBytes=read_rate)
    rows, reads = 5 * RATE, 4 * read_rate // 1000  # five seconds' worth, and four
    sent, read = tmp_path / "sent", tmp_path / "read"
    sent.mkdir()
    read.mkdir()

    driven = drive(
        SINK, connect_url, job, tmp_path, rows=rows, reads=reads, sent=str(sent), read=str(read)
    )

    assert driven.returncode == 0, driven.output[-5000:]
    assert driven.markers["rejected"].startswith("AuthenticationError: The admin server at "), (
        driven.markers
    )  # checked when made, before any data moved
    assert "from the executors" in driven.markers["rejected"]
    stamps = logged_stamps(sent)
    assert len(stamps) == rows
    assert driven.markers["sink_rows"] == rows
    assert driven.markers["sink_last"][0] == rows
    assert rate_between(stamps, stamps[0] + 0.5, stamps[-1]) == pytest.approx(RATE, rel=REL)
    stamps = logged_stamps(read)  # a stamp a byte
    assert len(stamps) == reads * 1000
    # A worker's first read is charged at the trickle its idle dispatch holds; the read after
    # it goes as soon as the worker's share arrives (a round trip), not when the trickle
    # would have paid for it.
    assert rate_between(stamps, stamps[0] + 0.5, stamps[-1]) == pytest.approx(read_rate, rel=REL)


FROM_CONF = """
def conf(**keys):
    for key, value in keys.items():
        spark.conf.set(f"spark.rgspark.{key}", value)


conf(url=args["url"], tenant=args["tenant"], namespace=args["namespace"], token=args["token"])
conf(onNoPolicy="unlimited")  # a rejected token is logged, and the job runs unthrottled
made = ResourceGroupClient.from_conf(spark)
say(client=repr(made), same=made is ResourceGroupClient.from_conf(spark), token=made.token)
say(count=throttle(spark.range(1000, numPartitions=2), kind="publish").count())
say(kinds=sorted(made.stats))
conf(namespace="other")
say(other=ResourceGroupClient.from_conf(spark).namespace)
spark.conf.unset("spark.rgspark.url")
try:
    ResourceGroupClient.from_conf(spark)
except RGSparkError as exc:
    say(missing=error(exc))
"""


def test_from_conf_on_a_connect_session(
    connect_url: str, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)

    driven = drive(FROM_CONF, connect_url, job, tmp_path)

    assert driven.returncode == 0, driven.output[-5000:]
    found = driven.markers
    assert found["client"] == (
        f"ResourceGroupClient({rg_server.url!r}, tenant={job.tenant!r}, namespace='ns')"
    )
    assert found["same"] is True  # keyed by the application, which Connect names too
    # The Connect server hides keys named like secrets from its clients, set or not: the
    # client has no token, and the driver is told why: once per client made (for ns, then
    # for other), not per call.
    assert found["token"] is None
    assert driven.output.count("rgspark: a Spark Connect session shows the driver's") == 2
    assert "rejected the job's token from the executors" in driven.output
    assert found["count"] == 1000
    assert found["kinds"] == ["publish"]  # throttle without a client used this one
    assert found["other"] == "other"
    assert found["missing"].startswith("ConfigurationError: ")
    assert "spark.rgspark.url" in found["missing"]
