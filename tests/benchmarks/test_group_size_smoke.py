"""The group-size benchmark runs end to end on PostgreSQL, tiny, and reports what it promises."""

from __future__ import annotations

import pytest

from tests.benchmarks.run import run_benchmark


def test_group_size_runs_and_reports() -> None:
    report = run_benchmark("group_size", "--sizes", "2,6", "--min-reports", "20", timeout=120)
    assert report["failed"] == 0
    assert [size["workers"] for size in report["sizes"]] == [2, 6]
    for size in report["sizes"]:
        # Every round of every cycle: 2 workers need two cycles of five rounds for 20.
        assert size["reports"] >= 20
        assert size["reports"] % (size["workers"] * 5) == 0
        assert size["cpu_ms_per_report"] > 0
        assert size["server_cpu_ms_per_report"] + size["database_cpu_ms_per_report"] == (
            pytest.approx(size["cpu_ms_per_report"], abs=0.01)
        )
    costs = [size["cpu_ms_per_report"] for size in report["sizes"]]
    assert report["flatness"] == pytest.approx(max(costs) / min(costs), abs=0.01)
