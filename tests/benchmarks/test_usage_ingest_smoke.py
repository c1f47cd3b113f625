"""The usage ingest benchmark runs end to end on PostgreSQL, tiny, and reports what it promises."""

from __future__ import annotations

from typing import Any

import pytest

from tests.benchmarks.run import run_benchmark

# Its servers run on a PostgreSQL database of their own, as in production.
pytestmark = pytest.mark.postgresql


def usage_ingest(*args: str) -> dict[str, Any]:
    """The benchmark's report, run tiny: 3 brokers of 50 namespaces, and ``args``."""
    return run_benchmark(
        "usage_ingest",
        *("--reporters", "3", "--namespaces-per-reporter", "50", "--spread", "3"),
        *args,
        timeout=180,
    )


def test_usage_ingest_runs_and_reports() -> None:
    report = usage_ingest(
        *("--steady-intervals", "1", "--changed-interval"),
        *("--spark-start", "10", "--spark-max", "20", "--spark-refine", "0"),
        *("--spark-seconds", "1", "--spark-warmup", "0.5"),
        *("--spark-server-processes", "1,2"),
    )

    assert {"broker_scale", "spark", "failed", "config", "database"} <= report.keys()
    assert report["failed"] == 0

    broker = report["broker_scale"]
    assert {"model", "bar_seconds", "first_interval", "steady_interval_seconds", "meets_bar"} <= (
        broker.keys()
    )
    assert broker["model"]["reporters"] == 3
    assert broker["model"]["namespaces"] == 50
    assert broker["model"]["reporters_per_namespace"] == 3
    assert broker["bar_seconds"] == 6.0
    assert len(broker["steady_intervals"]) == 1
    for interval in (broker["first_interval"], *broker["steady_intervals"]):
        assert interval["failed"] == 0
        assert interval["server_wall_seconds"] > 0
        assert {"server_cpu_seconds", "database_cpu_seconds", "rows_written"} <= interval.keys()
    # The first interval stores every reporter's every namespace; moving every demand by
    # 10% rewrites them all.
    assert broker["first_interval"]["rows_written"] == 3 * 50
    assert broker["changed_interval"]["rows_written"] == 3 * 50

    spark = report["spark"]
    assert {"sustained_reports_per_second", "worker_processes_per_server", "p99_bar_ms"} <= (
        spark.keys()
    )
    assert spark["p99_bar_ms"] == 100.0
    assert [step["offered_per_second"] for step in spark["steps"]][:1] == [10.0]
    for step in spark["steps"]:
        assert step["failed"] == 0
        assert step["completed_per_second"] > 0
        assert 0 < step["p50_ms"] <= step["p99_ms"]
    # The same shape against two server processes, compared with one.
    assert spark["model"]["server_processes"] == 1
    assert report["spark_by_server_processes"]["2"]["model"]["server_processes"] == 2
    assert set(report["spark_scaling"]) == {"1", "2"}
    assert report["spark_scaling"]["1"] == 1.0


def test_workers_on_leases_settle_then_are_measured_steady() -> None:
    report = usage_ingest(
        *("--shape", "spark", "--spark-every", "2", "--spark-start", "10", "--spark-max", "10"),
        *("--spark-refine", "0", "--spark-seconds", "2", "--spark-warmup", "60"),
    )
    spark = report["spark"]
    assert spark["model"]["report_every_seconds"] == 2.0
    [step] = spark["steps"]
    assert step["reporters"] == 20 and step["joined"] == 20
    # Every worker's last answer held for the 2 s lease before the step was measured: not
    # before they had all joined, over one lease, and long before the minute allowed.
    assert 2.0 <= step["settled_s"] < 60.0
    assert step["failed"] == 0 and step["passed"]
    assert spark["worker_processes_per_server"] == 20


def test_a_fleet_ramping_up_settles_once_its_last_worker_joined() -> None:
    report = usage_ingest(
        *("--shape", "spark", "--spark-every", "2", "--spark-start", "10", "--spark-max", "10"),
        *("--spark-refine", "0", "--spark-seconds", "2", "--spark-warmup", "60"),
        *("--spark-join-seconds", "6"),
    )
    spark = report["spark"]
    assert spark["model"]["join_seconds"] == 6.0
    [step] = spark["steps"]
    assert step["joined"] == 20
    # Not settled before the last of the 20 workers started, 6 s in.
    assert 6.0 <= step["settled_s"] < 60.0
    assert step["failed"] == 0 and step["passed"]


def test_brokers_reporting_at_once_over_two_server_processes() -> None:
    report = usage_ingest(
        *("--shape", "broker", "--settle-intervals", "1", "--steady-intervals", "1"),
        *("--broker-senders", "3", "--broker-server-processes", "2"),
    )
    broker = report["broker_scale"]
    assert broker["model"]["server_processes"] == 2
    assert "3 keep-alive connections at once" in broker["model"]["sending"]
    assert report["failed"] == 0
    # Every reporter's report is stored once in the first interval, whichever process took it.
    assert broker["first_interval"]["rows_written"] == 3 * 50
    assert [interval["failed"] for interval in broker["steady_intervals"]] == [0]
    # Each process's own CPU, so that a run whose connections all went to one shows it.
    assert len(broker["first_interval"]["server_cpu_seconds_by_process"]) == 2
