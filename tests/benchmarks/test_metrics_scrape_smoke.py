"""A tiny run of `python -m benchmarks.metrics_scrape`: it runs and its JSON has every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_metrics_scrape_benchmark_smoke() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.metrics_scrape", "--groups", "200", "--rounds", "1"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(completed.stdout)

    assert report["benchmark"] == "metrics_scrape"
    assert report["samples"] == 17 * 200
    assert report["same_samples"] is True
    assert report["ratio"] > 0
    assert report["bar"]["met"] == (report["ours_seconds"] < report["bar"]["seconds"])
