"""A setup that cannot work fails before any data moves, in one line that says what to do.

`client.check(spark)` and the first `throttle` of a client check the executors with a tiny
job: their Python imports rgspark and reaches the server with the job's token. Mistakes
that only executors see (their Python, their network) are made in jobs of their own under
``spark-submit``, as users make them; the rest runs in the test session's Spark.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rgspark import (
    AuthenticationError,
    ConfigurationError,
    PermissionDeniedError,
    ResourceGroupClient,
    ServerUnreachableError,
    _checks,
    throttle,
)
from tests.conftest import SUPERUSER
from tests.spark.submit import clean_site, python_without_site, submit, traceback_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.conftest import RGServer

spark_job = pytest.mark.spark

# Writes through throttle after checking: what a user's job does, with markers on stdout.
JOB = """
import json
import sys

from pyspark.sql import SparkSession
from rgspark import ResourceGroupClient, RGSparkError, throttle

url, tenant, namespace, token = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
client = ResourceGroupClient(url, tenant=tenant, namespace=namespace, token=token)
print(json.dumps({"driver": client.check()}), flush=True)
try:
    client.check(spark)
except RGSparkError as exc:
    print(json.dumps({"check": f"{type(exc).__name__}: {exc}"}), flush=True)
df = spark.range(1000, numPartitions=2)
throttle(df, client, "publish").write.format("noop").mode("overwrite").save()
print(json.dumps({"written": True}), flush=True)
"""


def closed_port_url() -> str:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def run_job(
    rg_server: RGServer, tmp_path: Path, *conf: str, env: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str], str]:
    """`JOB` under spark-submit with ``--conf`` settings `conf`: its markers, the traceback
    it ended with, and all it wrote (spark-submit sends a Python driver's stderr to stdout;
    the JVM's log goes to stderr)."""
    job = rg_server.namespace(publishRateInMsgs=1000)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    settings = [arg for setting in conf for arg in ("--conf", setting)]
    completed = submit(
        [
            *("--master", "local[2]", "--conf", "spark.ui.enabled=false", *settings),
            str(script),
            *(rg_server.url, job.tenant, job.namespace, job.token),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert completed.returncode == 1, (completed.stdout, completed.stderr[-5000:])
    markers = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return markers, traceback_of(completed.stdout), completed.stdout + completed.stderr


def assert_one_line(error: str, output: str, traceback: list[str]) -> None:
    """The job ended with `error` as its last line, and no JVM or py4j trace anywhere."""
    assert traceback[-1] == error
    assert "\n" not in error
    for noise in ("Py4JJavaError", "py4j.protocol", "\tat org.apache.spark", "PythonException"):
        assert noise not in output, output[-5000:]
    # Only the user's script and the rgspark frames that raised: half a screen at most.
    assert len(traceback) <= 20, "\n".join(traceback)


@spark_job
def test_executors_without_rgspark_fail_before_any_data_moves(
    rg_server: RGServer, tmp_path: Path
) -> None:
    # The driver has rgspark; the executors' Python has PySpark, PyArrow and httpx only.
    site = clean_site(tmp_path / "site")
    python = python_without_site(tmp_path / "python")

    markers, traceback, output = run_job(
        rg_server,
        tmp_path,
        f"spark.pyspark.python={python}",
        f"spark.pyspark.driver.python={sys.executable}",
        env={"PYTHONPATH": str(site)},
    )

    assert markers[0]["driver"]["limits"]["publishRateInMsgs"] == 1000  # the driver is fine
    error = markers[1]["check"]
    assert error.startswith(
        "ConfigurationError: rgspark cannot be imported on the executors "
        "(ModuleNotFoundError: No module named 'rgspark'; Python "
    )
    assert f"at {sys.executable} on " in error  # what the wrapper runs
    assert "set spark.pyspark.python (or PYSPARK_PYTHON" in error
    assert "--py-files rgspark.zip" in error
    # throttle says the same, before the write starts: nothing was written.
    assert traceback[-1] == f"rgspark.{error}"
    assert {"written": True} not in markers
    assert_one_line(f"rgspark.{error}", output, traceback)


@spark_job
def test_a_server_the_executors_cannot_reach_fails_before_any_data_moves(
    rg_server: RGServer, tmp_path: Path
) -> None:
    # The driver reaches the server; the executors go through a proxy that does not answer.
    markers, traceback, output = run_job(
        rg_server,
        tmp_path,
        f"spark.pyspark.python={sys.executable}",
        f"spark.executorEnv.HTTP_PROXY={closed_port_url()}",
    )

    assert markers[0]["driver"]["resourceGroup"] is not None
    error = markers[1]["check"]
    assert error.startswith(
        f"ServerUnreachableError: The executors cannot reach the admin server at "
        f"{rg_server.url} (on "
    )
    assert "Connection refused" in error
    assert "open its port to them, or give an address they can reach" in error
    assert {"written": True} not in markers
    assert_one_line(f"rgspark.{error}", output, traceback)


# ---------------------------------------------------------------------------------------------
# In the test session's Spark


@spark_job
def test_check_with_spark_checks_the_executors_too(
    spark: SparkSession, rg_server: RGServer
) -> None:
    job = rg_server.namespace(publishRateInMsgs=1000)
    assert job.client().check(spark)["resourceGroup"] == job.group

    # A token only the executors see rejected: the driver's half is not what failed.
    stranger = ResourceGroupClient(
        rg_server.url, tenant=job.tenant, namespace=job.namespace, token="not-a-token"
    )
    with pytest.raises(AuthenticationError) as rejected:
        _checks.check_executors(stranger, spark)
    assert rejected.value.status_code == 401
    assert str(rejected.value).startswith(
        f"The admin server at {rg_server.url} rejected the job's token from the executors (on "
    )
    denied = job.client(token=rg_server.token("stranger"))
    with pytest.raises(PermissionDeniedError, match="grant role stranger produce on") as refused:
        denied.check(spark)
    assert "from the executors" not in str(refused.value)  # the driver's half failed first


@spark_job
def test_throttle_checks_the_executors_once_per_application_and_client(
    spark: SparkSession, rg_server: RGServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = rg_server.namespace(publishRateInMsgs=1000)
    probes: list[ResourceGroupClient] = []
    run_probe = _checks._run_probe

    def counted(client: ResourceGroupClient, session: SparkSession) -> list[dict[str, Any]]:
        probes.append(client)
        return run_probe(client, session)

    monkeypatch.setattr(_checks, "_run_probe", counted)
    df = spark.range(10)

    throttle(df, job.client(), "publish")
    throttle(df, job.client(), "dispatch")  # another client object, the same settings
    assert len(probes) == 1
    throttle(df, job.client(token=rg_server.token(SUPERUSER)), "publish")  # another token
    assert len(probes) == 2


@spark_job
def test_throttle_fails_at_once_on_an_unreachable_server_unless_told_to_wait(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    url = closed_port_url()
    df = spark.range(10)

    def client(namespace: str = "ns", **options: Any) -> ResourceGroupClient:
        return ResourceGroupClient(url, tenant="t", namespace=namespace, timeout_s=5, **options)

    with pytest.raises(ServerUnreachableError, match="The executors cannot reach"):
        throttle(df, client(), "publish")
    # Waiting for the server, or running without it, is what these clients asked for: said
    # once per application and client settings. (What their jobs then do:
    # test_startup_modes.)
    with caplog.at_level(logging.WARNING, logger="rgspark"):
        throttle(df, client(on_no_policy="block"), "publish")
        throttle(df, client(on_no_policy="block"), "publish")
        throttle(df, client("other", on_no_policy={"publishMsgs": 100}), "publish")
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2, warnings
    assert all(w.startswith("rgspark: The executors cannot reach") for w in warnings)
    assert warnings[0].endswith("the workers do what on_no_policy='block' says")
    # A failure the client does not wait out is checked again, and raised again.
    with pytest.raises(ServerUnreachableError):
        throttle(df, client(), "publish")


@spark_job
def test_throttle_fails_at_once_on_a_rejected_token_even_when_told_to_wait(
    spark: SparkSession, rg_server: RGServer, caplog: pytest.LogCaptureFixture
) -> None:
    job = rg_server.namespace(publishRateInMsgs=1000)
    df = spark.range(10)
    with pytest.raises(AuthenticationError, match="rejected the job's token from the executors"):
        throttle(df, job.client(token="not-a-token", on_no_policy="block"), "publish")
    with caplog.at_level(logging.WARNING, logger="rgspark"):
        throttle(df, job.client(token="not-a-token", on_no_policy="unlimited"), "publish")
    assert "rejected the job's token" in caplog.records[0].getMessage()


@spark_job
def test_throttle_warns_when_the_namespace_has_no_group(
    spark: SparkSession, rg_server: RGServer, caplog: pytest.LogCaptureFixture
) -> None:
    job = rg_server.namespace()
    rg_server.call("DELETE", f"/admin/v2/namespaces/{job.tenant}/{job.namespace}/resourcegroup")
    with caplog.at_level(logging.WARNING, logger="rgspark"):
        throttle(spark.range(10), job.client(), "publish")
    assert [record.getMessage() for record in caplog.records] == [
        f"rgspark: {job.tenant}/{job.namespace} has no resource group (none of its own, of its "
        "tenant, nor a default one): its traffic is not limited"
    ]


# ---------------------------------------------------------------------------------------------
# What a failed check job says: the line that matters of the JVM's error


NO_PYTHON = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) (192.0.2.2 executor driver): java.io.IOException: Cannot run program "/nonexistent": error=2, No such file or directory
\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)
Caused by: java.io.IOException: error=2, No such file or directory
\tat java.base/java.lang.ProcessImpl.forkAndExec(Native Method)
"""  # noqa: E501
NO_PYSPARK = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (192.0.2.2 executor driver): org.apache.spark.SparkException:
Error from python worker:
  /usr/bin/python3: Error while finding module specification for 'pyspark.daemon' (ModuleNotFoundError: No module named 'pyspark')
PYTHONPATH was:
  /opt/spark/python/lib/pyspark.zip
org.apache.spark.SparkException: EOFException occurred while reading the port number from pyspark.daemon's stdout.
\tat org.apache.spark.errors.SparkCoreErrors$.eofExceptionWhileReadPortNumberError(SparkCoreErrors.scala:55)
"""  # noqa: E501
OTHER_PYTHON = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/opt/spark/python/lib/pyspark.zip/pyspark/worker.py", line 1100, in main
    raise PySparkRuntimeError(
pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.12 than that in driver: 3.11, PySpark cannot run with different minor versions.
"""  # noqa: E501


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            NO_PYTHON,
            'java.io.IOException: Cannot run program "/nonexistent": error=2, '
            "No such file or directory",
        ),
        (NO_PYSPARK, "ModuleNotFoundError: No module named 'pyspark'"),
        (
            OTHER_PYTHON,
            "PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has different "
            "version: 3.12 than that in driver: 3.11, PySpark cannot run with different minor "
            "versions.",
        ),
    ],
)
def test_a_failed_check_job_is_told_by_its_cause(text: str, line: str) -> None:
    assert _checks.job_failure(text) == line


@spark_job
def test_executors_whose_python_does_not_run_fail_in_one_line(
    rg_server: RGServer, tmp_path: Path
) -> None:
    markers, traceback, _ = run_job(
        rg_server,
        tmp_path,
        "spark.pyspark.python=/nonexistent/python3",
        f"spark.pyspark.driver.python={sys.executable}",
    )

    error = markers[1]["check"]
    assert error.startswith(
        "ConfigurationError: The executors cannot run Python tasks (java.io.IOException: "
        'Cannot run program "/nonexistent/python3": error=2, No such file or directory): set '
        "spark.pyspark.python (or PYSPARK_PYTHON, before the session starts) to a Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}, as on the driver,"
    )
    assert {"written": True} not in markers
    # Spark logs the failed task's trace itself; what the job raised is one line.
    assert traceback[-1] == f"rgspark.{error}"
    assert len(traceback) <= 20, "\n".join(traceback)


# ---------------------------------------------------------------------------------------------
# The Troubleshooting page quotes the lines these raise


def test_the_troubleshooting_page_quotes_the_errors_as_raised() -> None:
    from app.auth import create_token, generate_secret_key

    section = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    quoted = {
        line
        for block in re.findall(r"```\n(.*?)```", section, re.DOTALL)
        for line in block.splitlines()
    }
    token = create_token(subject="etl-job", secret_key=generate_secret_key())
    client = ResourceGroupClient(
        "http://127.0.0.1:8080", tenant="team-a", namespace="ingest", token=token
    )
    refused = "ConnectError: [Errno 111] Connection refused"
    raised = [
        ConfigurationError(
            _checks._import_advice(
                "ModuleNotFoundError: No module named 'rgspark'",
                "Python 3.11.2 at /usr/bin/python3 on worker-7",
            )
        ),
        _checks.explain(
            ServerUnreachableError("did not answer"), client, detail=refused, executor="worker-7"
        ),
        _checks.explain(
            AuthenticationError(
                "answered 401", status_code=401, reason="Invalid token: Invalid signature"
            ),
            client,
            detail="",
        ),
        _checks.explain(
            PermissionDeniedError(
                "answered 403",
                status_code=403,
                reason="Role etl-job may not report for namespace team-a/ingest: it needs the "
                "produce or consume permission",
            ),
            client,
            detail="",
        ),
    ]
    for error in raised:
        assert f"rgspark.{type(error).__name__}: {error}" in quoted
    assert (
        "rgspark: team-a/ingest has no resource group (none of its own, of its tenant, nor a "
        "default one): its traffic is not limited"
    ) in quoted
