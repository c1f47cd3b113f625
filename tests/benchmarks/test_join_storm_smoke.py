"""The join-storm benchmark runs end to end on PostgreSQL, tiny, and reports what it promises:
what the workers enforce stays within DESIGN.md's 5% of the quota in every quarter second."""

from __future__ import annotations

import pytest

from tests.benchmarks.run import run_benchmark

# Its servers run on a PostgreSQL database of their own, as in production.
pytestmark = pytest.mark.postgresql


def test_a_small_join_storm_holds_the_quota_and_reports() -> None:
    report = run_benchmark("join_storm", "--quick", timeout=180)

    assert report["workers"] == 40
    assert report["server_processes"] == 2
    assert report["database"].startswith("postgresql")
    assert report["samples"] == 24  # 6 s, a sample every quarter second
    assert {"lease", "grace", "fallback"} == report["peak"]["by_state"].keys()
    assert report["errors"] == []
    assert report["store_check"]["ok"], report["store_check"]["lines"]
    first = report["first_answer_s"]
    assert first["unanswered"] == 0
    assert 0 < first["p99"] <= first["max"]
    assert report["status"].get("200", 0) > 0
    assert isinstance(report["shed_503"], int)
    assert report["first_report_status"]["200"] == report["workers"]
    # DESIGN.md's bound, in every quarter second from the first join.
    assert report["max_enforced_ratio"] <= 1.05, report["peak"]
    assert report["samples_over_105_pct"] == 0
