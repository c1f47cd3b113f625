"""The live fleet benchmark runs a scenario end to end on PostgreSQL, shortened, and reports
sane figures. Where DESIGN.md's bound on the quota holds in a short run on a shared machine,
it is asserted as such; the other figures' bounds are generous, not the bars."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.run import REPO_ROOT, run_benchmark

# Its servers run on a PostgreSQL database of their own, as in production.
pytestmark = pytest.mark.postgresql

SCENARIO = REPO_ROOT / "benchmarks" / "scenarios" / "quota-change.json"
TRACE_COLUMNS = ["t_s", "reporter", "quota", "demand_rate", "allocated_rate", "consumed"]


def run_fleet(scenario: Path, *options: str) -> dict[str, Any]:
    """The fleet benchmark's report of a scenario, run over two server processes."""
    return run_benchmark("fleet", str(scenario), "--server-processes", "2", *options, timeout=180)


def test_fleet_runs_a_scenario_live_and_reports(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    # quota-change at a fifth of its length: 12 s, the quota cut to 300 at 4 s, raised to
    # 2000 at 8 s; three reporters over two server processes.
    report = run_fleet(SCENARIO, "--duration-scale", "0.2", "--trace", str(trace))

    assert report["errors"] == []
    assert report["scenario"] == "quota-change"
    assert report["database"].startswith("postgresql")
    assert report["server_processes"] == 2
    assert len(report["servers"]) == 2
    assert all(server["requests"] > 0 for server in report["servers"])
    assert report["duration_s"] == 12
    assert report["windows"] == 12
    assert report["in_force_samples"]["count"] == 120
    # Every reporter reports at least once an interval, from each join to the end.
    assert report["reports"] >= 3 * 11
    assert [change["quota"] for change in report["quota_changes"]] == [300, 2000]
    assert all(change["put_answered_s"] is not None for change in report["quota_changes"])

    # The group holds its quota: outside the interval in which a cut reaches the reporters,
    # the allocations in force stay within DESIGN.md's 5% of it, and so does what the
    # reporters consume. Utilization is short of the 98% bar only because in a run this
    # short the first second, while the workers join, weighs a twelfth.
    assert 50 <= report["max_in_force_pct"] <= 105
    assert report["max_in_force_pct_after_cut"] is not None
    assert report["max_in_force_pct_after_cut"] > 0
    assert report["after_quota_notice"]["max_overshoot_pct"] <= 5
    assert 90 < report["after_quota_notice"]["utilization_pct"] <= 105
    for figure in ("steady_error_pct", "jain_fairness", "convergence_intervals"):
        assert figure in report
    assert 0 < report["jain_fairness"] <= 1
    assert {"max_overshoot_pct", "utilization_pct"} <= report["simulated"].keys()

    with trace.open(newline="") as rows:
        table = list(csv.reader(rows))
    assert table[0] == TRACE_COLUMNS
    assert len(table) == 1 + 3 * 12
    consumed = sum(float(row[5]) for row in table[1:])
    assert consumed > 0


def test_a_join_storm_holds_the_quota_in_force() -> None:
    # namespace-heads at a tenth of its length: 21 workers join at once over two server
    # processes, and the first to be answered holds the whole quota until its share falls.
    # Its fall reaches it an answer's way later, on a machine this busy up to 0.6 s: were
    # its room handed to the others before it slowed down, they would run on top of it
    # (108-162% in force in some runs, measured; the interleavings themselves are tested
    # one by one in tests/app/test_falls_in_force.py). The bound is DESIGN.md's, with a
    # point for sampling: the newcomers' probes are all that may exceed the quota.
    scenario = REPO_ROOT / "benchmarks" / "scenarios" / "namespace-heads.json"
    report = run_fleet(scenario, "--duration-scale", "0.1")
    assert report["errors"] == []
    assert report["in_force_samples"]["count"] == 60
    assert report["max_in_force_pct"] <= 106, report["in_force_samples"]["peak"]


def test_a_fleet_starting_together_holds_the_quota_from_its_first_second(tmp_path: Path) -> None:
    # fleet-start: eight workers in three namespaces join at once, each wanting the whole
    # quota, for 6 s. DESIGN.md's bound on what they send, window by window from the first:
    # the first answered holds the quota until its share falls, the others probe meanwhile,
    # and every bucket starts empty, so no window may exceed the quota by more than 5%.
    trace = tmp_path / "trace.csv"
    scenario = REPO_ROOT / "benchmarks" / "live_scenarios" / "fleet-start.json"
    report = run_fleet(scenario, "--trace", str(trace))
    assert report["errors"] == []
    assert report["max_in_force_pct"] <= 105, report["in_force_samples"]["peak"]

    totals = [0.0] * report["windows"]
    with trace.open(newline="") as rows:
        for row in csv.DictReader(rows):
            totals[int(row["t_s"])] += float(row["consumed"])
    assert max(totals) <= 1.05 * 1000, totals
    # And it does send: from the third window on, the quota is in use. The second holds the
    # shares' convergence from the first answered worker's whole quota (DESIGN.md bounds it
    # from above only): three of four runs use 90% of it or more, one in four 84%.
    assert totals[1] >= 0.75 * 1000, totals
    assert min(totals[2:]) >= 0.9 * 1000, totals
