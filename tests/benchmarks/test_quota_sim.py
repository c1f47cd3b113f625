"""The quota simulator: DESIGN.md's bars on every scenario, and project beating the baselines."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from benchmarks import quota_sim
from benchmarks.quota_sim import (
    SCENARIOS,
    Member,
    Scenario,
    Window,
    beats,
    metrics,
    simulate,
)

NAMES = sorted(path.stem for path in SCENARIOS.glob("*.json"))

ROOT = Path(__file__).resolve().parents[2]


@cache
def run(name: str, algorithm: str, seed: int = 0) -> dict[str, Any]:
    return simulate(Scenario.load(SCENARIOS / f"{name}.json"), algorithm, seed=seed)


def test_the_shared_scenarios_are_all_here() -> None:
    assert NAMES == ["demand-shift", "join-leave", "quota-change", "two-equal", "uneven-demand"]


def assert_bars(result: dict[str, Any], scenario: Scenario) -> None:
    notice = result["after_quota_notice"]
    assert notice["max_overshoot_pct"] <= 5
    if not any(quota < scenario.quota_at(at_s - 1e-9) for at_s, quota in scenario.quota_changes):
        # Only a quota cut overshoots until it reaches every reporter, whatever the algorithm.
        assert result["max_overshoot_pct"] <= 5
    if notice["utilization_pct"] is not None:
        assert 98 <= notice["utilization_pct"] <= 102
    assert result["convergence_intervals"] is not None
    assert result["convergence_intervals"] <= 3
    assert result["jain_fairness"] >= 0.99
    assert result["steady_error_pct"] <= 1


@pytest.mark.parametrize("name", NAMES)
def test_project_meets_the_bars(name: str) -> None:
    assert_bars(run(name, "project"), Scenario.load(SCENARIOS / f"{name}.json"))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_project_meets_the_bars_whatever_the_reporters_phases(name: str, seed: int) -> None:
    assert_bars(run(name, "project", seed), Scenario.load(SCENARIOS / f"{name}.json"))


@pytest.mark.parametrize("baseline", ["pulsar", "static"])
@pytest.mark.parametrize("name", NAMES)
def test_project_beats_the_baselines_on_every_metric(name: str, baseline: str) -> None:
    verdict = beats(run(name, "project"), run(name, baseline))
    assert verdict == dict.fromkeys(verdict, True)


def test_pulsar_overshoots_when_reporters_start_and_never_lets_a_throttled_one_grow() -> None:
    pulsar = run("uneven-demand", "pulsar")
    assert pulsar["max_overshoot_pct"] > 5  # every newcomer gets the whole quota
    assert pulsar["convergence_intervals"] is None  # stuck in proportion to first usage
    assert pulsar["jain_fairness"] < 0.99


def test_static_ignores_demand() -> None:
    static = run("uneven-demand", "static")
    assert static["utilization_pct"] < 80  # 40 each, while mid wants 50 and small 10


class TestMetrics:
    """The metric definitions on windows computed by hand."""

    scenario = Scenario(
        name="hand",
        quota=100,
        interval_s=1,
        duration_s=6,
        quota_changes=(),
        members=(
            Member("a", 0, None, ((0, 80), (3, 30))),
            Member("b", 0, None, ((0, 80),)),
        ),
    )

    def windows(self, consumed: list[tuple[float, float]]) -> list[Window]:
        result = []
        for k, (a, b) in enumerate(consumed):
            demand = {"a": 80.0 if k < 3 else 30.0, "b": 80.0}
            result.append(Window(k, 100, demand, {"a": a, "b": b}, {"a": 0, "b": 0}, a + b))
        return result

    def test_definitions(self) -> None:
        # Ideal: 50/50 until 3 s, then 30/70. Events at 0 s and 3 s; steady windows none
        # (each event is followed by fewer than 3 windows before the next or the end).
        figures = metrics(
            self.scenario,
            self.windows([(80, 30), (52, 49), (50, 50), (40, 60), (30, 70), (31, 71)]),
        )
        assert figures["max_overshoot_pct"] == pytest.approx(10)
        assert figures["utilization_pct"] == pytest.approx((110 + 101 + 100 + 100 + 100 + 102) / 6)
        assert [e["intervals"] for e in figures["convergence_by_event"]] == [1, 1]
        assert figures["convergence_intervals"] == 1
        assert figures["steady_windows"] == 0
        assert figures["steady_error_pct"] is None and figures["jain_fairness"] is None

    def test_steady_windows_and_fairness(self) -> None:
        scenario = Scenario("hand", 100, 1, 6, (), (Member("a", 0, None, ((0, 80),)),))
        windows = [
            Window(k, 100, {"a": 80}, {"a": c}, {"a": 0}, c)
            for k, c in enumerate([10, 40, 70, 80, 76, 80])
        ]
        figures = metrics(scenario, windows)
        assert figures["steady_windows"] == 3
        assert figures["steady_error_pct"] == pytest.approx((0 + 4 + 0) / 3)
        assert figures["jain_fairness"] == 1
        assert figures["utilization_pct"] is None  # demand never reached the quota

    def test_never_converging_is_null(self) -> None:
        figures = metrics(
            self.scenario,
            self.windows([(80, 20), (80, 20), (80, 20), (30, 70), (30, 70), (30, 70)]),
        )
        assert [e["intervals"] for e in figures["convergence_by_event"]] == [None, 0]
        assert figures["convergence_intervals"] is None


class TestCommand:
    def test_one_scenario_with_a_trace(self, tmp_path: Path) -> None:
        trace = tmp_path / "trace.csv"
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.quota_sim",
                str(SCENARIOS / "two-equal.json"),
                "--algorithm",
                "static",
                "--trace",
                str(trace),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        result = json.loads(out)
        assert (result["scenario"], result["algorithm"]) == ("two-equal", "static")
        for key in (
            "max_overshoot_pct",
            "utilization_pct",
            "steady_error_pct",
            "convergence_intervals",
            "jain_fairness",
        ):
            assert key in result
        with trace.open() as rows:
            table = list(csv.DictReader(rows))
        assert list(table[0]) == [
            "t_s",
            "reporter",
            "quota",
            "demand_rate",
            "allocated_rate",
            "consumed",
        ]
        assert len(table) == 30 * 2
        assert {row["allocated_rate"] for row in table[10:]} == {"500.000"}

    def test_all_scenarios_in_a_directory(self, tmp_path: Path) -> None:
        shutil.copy(SCENARIOS / "uneven-demand.json", tmp_path)
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.quota_sim", "--all", str(tmp_path)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        result = json.loads(out)
        assert set(result["results"]["uneven-demand"]) == set(quota_sim.ALGORITHMS)
        assert result["project_beats_all"] is True
