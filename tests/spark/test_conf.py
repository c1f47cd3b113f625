"""A job configured the Spark way: ``spark.rgspark.*`` keys, and `throttle` without a client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rgspark import ConfigurationError, ResourceGroupClient, throttle
from rgspark._conf import options_from

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.conftest import JobNamespace, RGServer

spark_job = pytest.mark.spark

RATE = 2000  # msgs/s
ROWS = 20_000  # ten seconds' worth

BASE = {
    "spark.rgspark.url": "http://rg.internal:8080",
    "spark.rgspark.tenant": "team-a",
    "spark.rgspark.namespace": "ingest",
}


def options(**keys: str) -> dict[str, object]:
    """The client's arguments from `BASE` and `keys` (names after ``spark.rgspark.``)."""
    conf = {**BASE, **{f"spark.rgspark.{name}": value for name, value in keys.items()}}
    return options_from(conf.get)


def conf_of(job: JobNamespace, **extra: str) -> dict[str, str]:
    return {
        "spark.rgspark.url": job.server.url,
        "spark.rgspark.tenant": job.tenant,
        "spark.rgspark.namespace": job.namespace,
        "spark.rgspark.token": job.token,
        **{f"spark.rgspark.{name}": value for name, value in extra.items()},
    }


@pytest.fixture
def configured(spark: SparkSession) -> Iterator[SparkSession]:
    """A session of its own on the test Spark, for keys set by a test."""
    yield spark.newSession()


# ---------------------------------------------------------------------------------------------
# The keys


def test_the_required_keys_make_a_client() -> None:
    assert options() == {
        "url": "http://rg.internal:8080",
        "tenant": "team-a",
        "namespace": "ingest",
    }


@pytest.mark.parametrize("name", ["url", "tenant", "namespace"])
def test_a_missing_key_is_named(name: str) -> None:
    conf = {key: value for key, value in BASE.items() if key != f"spark.rgspark.{name}"}
    with pytest.raises(ConfigurationError, match=rf"^spark\.rgspark\.{name} is not set: set it"):
        options_from(conf.get)


def test_timeouts_are_spark_durations() -> None:
    timeouts = options(startupTimeout="2min", timeout="500ms")
    assert (timeouts["startup_timeout_s"], timeouts["timeout_s"]) == (120.0, 0.5)
    assert options(timeout="30")["timeout_s"] == 30.0
    assert options(timeout="1.5s")["timeout_s"] == 1.5
    with pytest.raises(ConfigurationError, match=r"spark\.rgspark\.timeout must be a duration"):
        options(timeout="soon")


def test_on_no_policy_is_a_mode_or_safe_rates() -> None:
    assert options(onNoPolicy="block")["on_no_policy"] == "block"
    rates = options(onNoPolicy="publishMsgs=100, publishBytes=1048576")["on_no_policy"]
    assert rates == {"publishMsgs": 100.0, "publishBytes": 1048576.0}
    with pytest.raises(ConfigurationError, match="is not dimension=rate"):
        options(onNoPolicy="publishMsgs=lots")


def test_the_token_comes_from_a_file_read_on_the_driver(tmp_path: Path) -> None:
    token_file = tmp_path / "job.token"
    token_file.write_text("eyJ.token.sig\n")
    assert options(tokenFile=str(token_file))["token"] == "eyJ.token.sig"
    assert options(tokenFile=f"file://{token_file}")["token"] == "eyJ.token.sig"
    with pytest.raises(ConfigurationError, match="tokenFile cannot be read on the driver"):
        options(tokenFile=str(tmp_path / "missing.token"))
    with pytest.raises(ConfigurationError, match=r"token and spark\.rgspark\.tokenFile are both"):
        options(token="t", tokenFile=str(token_file))
    token_file.write_text("\n")
    with pytest.raises(ConfigurationError, match="tokenFile is empty"):
        options(tokenFile=str(token_file))


# ---------------------------------------------------------------------------------------------
# From a session's configuration


@spark_job
def test_from_conf_reads_the_session_and_keeps_one_client(configured: SparkSession) -> None:
    for key, value in BASE.items():
        configured.conf.set(key, value)
    configured.conf.set("spark.rgspark.onNoPolicy", "unlimited")

    client = ResourceGroupClient.from_conf(configured)
    assert client.url == "http://rg.internal:8080"
    assert (client.tenant, client.namespace) == ("team-a", "ingest")
    assert client.on_no_policy == "unlimited"
    assert ResourceGroupClient.from_conf(configured) is client  # its stats gather every call
    configured.conf.set("spark.rgspark.namespace", "other")
    assert ResourceGroupClient.from_conf(configured).namespace == "other"


@spark_job
def test_from_conf_names_the_key_of_a_wrong_value(configured: SparkSession) -> None:
    for key, value in BASE.items():
        configured.conf.set(key, value)
    configured.conf.set("spark.rgspark.url", "rg.internal:8080")
    with pytest.raises(ConfigurationError, match=r"^spark\.rgspark\.url must be an http://"):
        ResourceGroupClient.from_conf(configured)
    configured.conf.set("spark.rgspark.url", "http://rg.internal:8080")
    configured.conf.set("spark.rgspark.onNoPolicy", "wait")
    with pytest.raises(ConfigurationError, match=r"^spark\.rgspark\.onNoPolicy must be one of"):
        ResourceGroupClient.from_conf(configured)


@spark_job
def test_throttle_without_a_client_or_keys_says_which_key(configured: SparkSession) -> None:
    with pytest.raises(ConfigurationError, match=r"^spark\.rgspark\.url is not set"):
        throttle(configured.range(10), kind="publish")
    with pytest.raises(ConfigurationError, match="kind must be 'publish' or 'dispatch', not None"):
        throttle(configured.range(10))


@spark_job
def test_a_session_built_with_the_keys_is_throttled_without_a_client(
    spark: SparkSession, rg_server: RGServer
) -> None:
    from pyspark.sql import SparkSession

    job = rg_server.namespace(publishRateInMsgs=RATE)
    conf = conf_of(job, timeout="5s")
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()  # the test Spark's session, with the keys set
    try:
        warm = spark.range(100, numPartitions=2)
        throttle(warm, kind="publish").write.format("noop").mode("overwrite").save()
        df = session.range(ROWS, numPartitions=4)
        start = time.monotonic()
        count = throttle(df, kind="publish").count()
        elapsed = time.monotonic() - start
        client = ResourceGroupClient.from_conf(session)
    finally:
        for key in conf:
            session.conf.unset(key)

    assert count == ROWS
    assert 7 <= elapsed <= 20, f"{ROWS} rows at {RATE} msgs/s took {elapsed:.1f} s"
    assert (client.url, client.tenant, client.token, client.timeout_s) == (
        job.server.url,
        job.tenant,
        job.token,
        5.0,
    )
    assert client.stats["publish"].rows == 100 + ROWS  # the warm-up's and the job's
