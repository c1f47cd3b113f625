"""The pushback benchmark runs end to end, tiny, and reports what it promises."""

from __future__ import annotations

import warnings

import pytest

from tests.benchmarks.run import run_benchmark

# The marker is registered by tests/spark/conftest.py, which pytest loads only once it
# collects that folder: this one may come first.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    pytestmark = pytest.mark.spark


def test_pushback_runs_and_reports() -> None:
    report = run_benchmark("pushback", "--quick", "--seconds", "4", timeout=240)

    assert report["benchmark"] == "pushback"
    assert set(report["meets_bars"]) == {"converged", "exactly_once", "other_rises"}
    assert report["config"]["quick"] is True
    assert report["config"]["server_errors_logged"] == 0

    figures = report["pushback"]
    assert {
        "limit",
        "quota",
        "converged",
        "time_to_converge_s",
        "converged_rate",
        "ids",
        "pushbacks",
        "pushback_s",
        "other_rate",
        "other_room",
        "series",
    } <= set(figures)
    assert figures["job_errors"] == [None, None]
    # Every id exactly once, however short the run: that is no figure but a guarantee.
    ids = figures["ids"]
    assert ids["received"] == ids["expected"] == 800 * 4
    assert ids["lost"] == ids["duplicated"] == ids["unexpected"] == 0
    assert figures["pushbacks"] > 0  # the destination pushed back, and it was counted

    baseline = report["baseline"]
    assert baseline["job_failed"] is True
    assert baseline["ids"]["lost"] > 0
