"""Pushback end to end: real PySpark jobs, a real admin server, real HTTP destinations.

A destination takes at most ``LIMIT`` rows per second (a sliding window) and answers 429 with a
``Retry-After`` above; the group allows ``QUOTA`` msgs/s to two namespaces. The margins are
generous: `benchmarks.pushback` measures the same set-up against its bars.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from benchmarks.pushback import (
    Destination,
    convergence,
    destination,
    rate_between,
    run_together,
    sink_job,
)
from tests.factories import create_namespace
from tests.spark.conftest import JobNamespace, RGServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

QUOTA = 2000
LIMIT = 800
SECONDS = 20


def shared_group(server: RGServer) -> tuple[JobNamespace, JobNamespace]:
    """Two namespaces of one tenant in one group that allows `QUOTA` msgs/s."""
    first = server.namespace(publishRateInMsgs=QUOTA)
    second = dataclasses.replace(first, namespace="other")
    create_namespace(
        server.admin, f"{first.tenant}/other", group=first.group, producers=[first.role]
    )
    return first, second


def test_a_sink_settles_at_what_its_destination_takes_and_its_group_gets_the_rest(
    spark: SparkSession, rg_server: RGServer
) -> None:
    pushy_ns, other_ns = shared_group(rg_server)
    pushy_client, other_client = pushy_ns.client(), other_ns.client()
    rows = LIMIT * SECONDS
    with destination(LIMIT) as pushy, destination(None) as other:
        errors = run_together(
            sink_job(spark, pushy_client, pushy.url, rows, 1),
            sink_job(spark, other_client, other.url, (QUOTA - LIMIT) * SECONDS * 2, 1),
        )
    assert errors == [None, None]

    # Every id exactly once, though the destination refused posts.
    assert pushy.received(rows) == {
        "expected": rows,
        "received": rows,
        "lost": 0,
        "duplicated": 0,
        "unexpected": 0,
    }
    assert pushy.refused > 0
    stats = pushy_client.stats["publish"]
    assert stats.rows == rows
    assert stats.pushbacks == pushy.refused
    assert stats.pushback_s > 0

    # The rate at the destination, over the job's second half: near the limit.
    start, end = pushy.taken[0][0], pushy.taken[-1][0]
    middle = (start + end) / 2
    settled = rate_between(pushy.taken, middle, end - 1)
    other_rate = rate_between(other.taken, middle, end - 1)
    figures = f"pushed back: {settled:.0f}/s, other: {other_rate:.0f}/s"
    assert 0.7 * LIMIT <= settled <= 1.05 * LIMIT, figures
    # The room it leaves goes to the other namespace: more than an equal half of the quota.
    assert other_rate > QUOTA / 2, figures
    assert convergence(pushy.taken, LIMIT)["converged_rate"] <= 1.05 * LIMIT


def test_without_pushback_support_the_job_fails_and_rows_are_lost(
    spark: SparkSession, rg_server: RGServer
) -> None:
    namespace = rg_server.namespace(publishRateInMsgs=QUOTA)
    rows = LIMIT * 4
    with destination(LIMIT) as plain:
        job = sink_job(spark, namespace.client(), plain.url, rows, 1, plain=True)
        (error,) = run_together(job)
    assert error is not None
    assert "the destination answered 429" in str(error)
    received = plain.received(rows)
    assert received["lost"] > 0
    assert received["duplicated"] == 0


def test_the_destination_refuses_above_its_limit() -> None:
    endpoint = Destination(limit=10)
    try:
        assert endpoint.offer(list(range(10))) is None
        wait = endpoint.offer([10])
        assert wait is not None and 0 < wait <= 1.0
        assert endpoint.received(11) == {
            "expected": 11,
            "received": 10,
            "lost": 1,
            "duplicated": 0,
            "unexpected": 0,
        }
    finally:
        endpoint.close()
