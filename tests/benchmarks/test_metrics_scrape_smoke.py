"""A tiny run of `python -m benchmarks.metrics_scrape`: it runs and its JSON has every figure."""

from __future__ import annotations

from tests.benchmarks.run import run_benchmark


def test_metrics_scrape_benchmark_smoke() -> None:
    report = run_benchmark("metrics_scrape", "--groups", "200", "--rounds", "1", timeout=60)

    assert report["benchmark"] == "metrics_scrape"
    assert report["samples"] == 17 * 200
    assert report["same_samples"] is True
    assert report["ratio"] > 0
    assert report["bar"]["met"] == (report["ours_seconds"] < report["bar"]["seconds"])
