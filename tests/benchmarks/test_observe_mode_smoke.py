"""The observe-mode benchmark runs end to end, tiny, and reports what it promises."""

from __future__ import annotations

import warnings

import pytest

from tests.benchmarks.run import run_benchmark

# The marker is registered by tests/spark/conftest.py, which pytest loads only once it
# collects that folder: this one may come first.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    pytestmark = pytest.mark.spark


def test_observe_mode_runs_and_reports() -> None:
    report = run_benchmark("observe_mode", "--quick", "--quota", "5000", timeout=300)

    assert report["benchmark"] == "observe_mode"
    assert set(report["meets_bars"]) == {"unthrottled", "figures", "enforce_after_switch"}
    assert report["config"]["quick"] is True
    assert report["config"]["server_errors_logged"] == 0

    compared = report["side_by_side"]
    assert (compared["rounds"], len(compared["pair_ratios"])) == (1, 1)
    assert compared["ratio"] > 0
    # Enforced, the job would have taken far longer than it did: it was not held back.
    assert max(compared["observed_s"]) < compared["enforced_s"]

    charge = report["charge_us"]
    assert charge["unlimited"] > 0 and charge["observed"] > 0

    switch = report["switch"]
    observed = switch["observed"]
    # Figures, not the bars: a smoke run is too short and its machine too busy.
    assert observed["history"]["mode"] == "observe"
    assert observed["metrics"]["observe"] == 1.0
    assert observed["top"]["mode"] == "observe"
    assert min(switch["observed_rows_per_s"]) > 5000  # unheld, well above the quota
    assert len(switch["enforced_rows_per_s"]) == 2
    assert all(rows < 5000 * 1.5 for rows in switch["enforced_rows_per_s"]), switch
