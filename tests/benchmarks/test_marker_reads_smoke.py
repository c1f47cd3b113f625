"""The marker-reads benchmark runs end to end on PostgreSQL, tiny, and reports what it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.postgresql


def test_marker_reads_runs_and_reports() -> None:
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.marker_reads"),
            *("--groups", "200", "--planned", "1,50", "--repeats", "3"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert (report["benchmark"], report["groups"]) == ("marker_reads", 200)
    assert set(report["by_name_ms"]) == {"1", "50"}
    assert all(ms > 0 for ms in report["by_name_ms"].values())
    assert set(report["compare_in_db_ms"]) == {"1", "50"}
    assert all(ms > 0 for ms in report["compare_in_db_ms"].values())
    assert report["changed_since_ms"] > 0
