"""The marker-reads benchmark runs end to end on PostgreSQL, tiny, and reports what it promises."""

from __future__ import annotations

import pytest

from tests.benchmarks.run import run_benchmark

pytestmark = pytest.mark.postgresql


def test_marker_reads_runs_and_reports() -> None:
    report = run_benchmark(
        "marker_reads", *("--groups", "200", "--planned", "1,50", "--repeats", "3"), timeout=120
    )
    assert (report["benchmark"], report["groups"]) == ("marker_reads", 200)
    assert set(report["by_name_ms"]) == {"1", "50"}
    assert all(ms > 0 for ms in report["by_name_ms"].values())
    assert set(report["compare_in_db_ms"]) == {"1", "50"}
    assert all(ms > 0 for ms in report["compare_in_db_ms"].values())
    assert report["changed_since_ms"] > 0
