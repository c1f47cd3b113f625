"""The Spark throttle benchmark runs end to end, tiny, and reports what it promises."""

from __future__ import annotations

import warnings

import pytest

from benchmarks.spark_throttle import MIN_WINDOW_S
from tests.benchmarks.run import run_benchmark

SECONDS = 2
RATE = 2000

# The marker is registered by tests/spark/conftest.py, which pytest loads only once it
# collects that folder: this one may come first.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    pytestmark = pytest.mark.spark


def test_spark_throttle_runs_and_reports() -> None:
    report = run_benchmark(
        "spark_throttle",
        "--quick",
        *("--seconds", str(SECONDS), "--rate", str(RATE), "--rows", "50000"),
        *("--rounds", "1", "--charges", "500"),
        timeout=180,
    )

    assert {"benchmark", "accuracy", "overhead", "meets_bars", "method", "config"} <= set(report)
    assert set(report["meets_bars"]) == {"accuracy", "overhead", "reporting"}
    assert {"accuracy", "overhead", "reporting"} <= set(report["method"])
    assert report["config"]["quick"] is True
    assert report["config"]["server_errors_logged"] == 0

    accuracy = report["accuracy"]
    assert accuracy["bar"] == 0.05
    for dimension, unit, row_bytes in (("msgs", "msgs/s", 8), ("bytes", "bytes/s", 24)):
        result = accuracy[dimension]
        assert {
            "quota",
            "achieved",
            "error",
            "within_bar",
            "window_s",
            "long_enough",
            "rows_in_window",
            "action_s",
            "action_rate",
            "throttled_task_s",
        } <= set(result)
        assert result["unit"] == unit
        assert result["rows"] == RATE * SECONDS
        assert result["bytes_per_row"] == row_bytes
        assert result["tasks"] == 2
        # Long enough for the bar only when steady for MIN_WINDOW_S: a quick run on a busy
        # machine, whose job takes longer, may be.
        long_enough = result["steady_part"] and result["window_s"] >= MIN_WINDOW_S
        assert result["long_enough"] is long_enough
        # A window of a second or so on a shared machine: figures, not the bar.
        assert result["achieved"] > 0
        assert result["window_s"] > 0
        assert result["throttled_task_s"] > 0
    assert accuracy["msgs"]["quota"] == RATE
    assert accuracy["bytes"]["quota"] == round(RATE * SECONDS * 24 / SECONDS)

    reporting = report["reporting"]
    assert reporting["workers"] == 2
    # Twice the accuracy jobs' rows, in tasks of half a second per worker.
    assert reporting["partitions"] == 2 * SECONDS * 4
    # The job is about as long as its settling: counted whole unless a busy machine made it
    # run past it; a figure, not the bar.
    if reporting["steady_part"]:
        assert reporting["reports_in_window"] <= reporting["reports"]
    else:
        assert reporting["reports_in_window"] == reporting["reports"]
    assert reporting["reports"] >= reporting["workers"]  # each worker reported at least once
    assert reporting["reports_per_worker_lease"] > 0

    cost = report["charge_cost"]
    assert cost["path"].startswith("NamespaceQuota.acquire -> Limiter")
    assert (cost["calls"], cost["rounds"]) == (500, 1)
    assert 0 < cost["fastest_round_us"] <= cost["us_per_charge"]
    assert cost["waits"] == 0  # the limiter's cost alone: no measured call was held back
    assert "charge_cost" in report["method"]

    overhead = report["overhead"]
    assert {
        "identity_rows_per_s",
        "throttle_rows_per_s",
        "ratio",
        "ratio_of_best",
        "cpu_ratio",
        "pair_ratios",
        "bar",
        "meets_bar",
    } <= set(overhead)
    assert overhead["bar"] == 0.95
    assert (overhead["rows"], overhead["rounds"], len(overhead["pair_ratios"])) == (50000, 1, 1)
    assert overhead["ratio"] > 0
    assert overhead["throttled_task_s"] == 0.0  # nothing is limited
