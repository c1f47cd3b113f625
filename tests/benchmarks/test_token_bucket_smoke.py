"""A tiny run of `python -m benchmarks.token_bucket`: it runs and its JSON has every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEERS = {
    "falconry_token_bucket",
    "limits_moving_window",
    "pyrate_limiter_token_bucket",
    "pyrate_limiter_in_memory",
}


def test_token_bucket_benchmark_smoke() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.token_bucket", "--seconds", "0.1", "--rounds", "1"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(completed.stdout)

    assert report["benchmark"] == "token_bucket"
    assert set(report["consume_calls_per_s"]) == {"rgspark"} | PEERS
    assert set(report["ratio_ours_to_peer"]) == PEERS
    figures = [
        *report["consume_calls_per_s"].values(),
        *report["ratio_ours_to_peer"].values(),
        report["two_threads"]["calls_per_s"],
        report["two_threads"]["ratio_to_one_thread"],
    ]
    assert all(isinstance(x, float) and x > 0 for x in figures)
    assert isinstance(report["bar"]["met"], bool)
