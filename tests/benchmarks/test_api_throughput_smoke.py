"""The API throughput benchmark runs end to end, tiny, and reports what it promises."""

from __future__ import annotations

import pytest

from tests.benchmarks.run import run_benchmark

# Its servers run on a PostgreSQL database of their own, as in production.
pytestmark = pytest.mark.postgresql


def test_api_throughput_runs_and_reports() -> None:
    report = run_benchmark(
        "api_throughput",
        *("--seconds", "0.5", "--rounds", "1", "--concurrency", "4", "--warmup", "0"),
        timeout=60,
    )

    assert report["ratio"] > 0
    expected = {"bar", "meets_bar", "ratio_per_round", "cpu_efficiency_ratio", "config"}
    assert expected <= report.keys()
    for side in ("ours", "bare"):
        figures = report[side]
        assert figures["median_rps"] > 0
        assert len(figures["rps_per_round"]) == 1
        assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert figures["requests"] > 0
        assert figures["failed"] == 0
        assert set(figures["statuses"]) == {"200"}
    # On PostgreSQL against SQLite, in the same run: the GET, and admin writes (204s).
    for comparison, sides, status in (
        ("postgresql_get", [report["postgresql_get"]["postgresql"]], "200"),
        ("admin_writes", list(report["admin_writes"]["summaries"].values()), "204"),
    ):
        assert report[comparison]["ratio"] > 0
        assert report[comparison]["bar"] == 0.5
        assert len(report[comparison]["ratio_per_round"]) == 1
        for figures in sides:
            assert figures["median_rps"] > 0
            assert figures["failed"] == 0
            assert set(figures["statuses"]) == {status}
    assert set(report["admin_writes"]["summaries"]) == {"postgresql", "sqlite"}
    config = report["config"]
    assert config["concurrency"] == 4
    assert config["seconds_per_round"] == 0.5
    assert config["rounds"] == 1
    assert config["workers"] == 1
    assert "cpu_pinning" in config
    # Both servers answered the same body, so the comparison was like for like.
    assert len(set(config["response_bytes"].values())) == 1
    assert set(config["response_bytes"]) == {"ours", "bare", "postgresql"}
