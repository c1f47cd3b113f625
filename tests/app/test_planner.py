"""The planner's cases, without a database: each file of `planner_cases` holds a group's state
(the rows counted in it), a sequence of reports, leaves and quota changes, what each step
should grant and leave in force, and the bound it checks.

The runner keeps the group as the store does, in memory: each report is planned from a
summary made anew from every row (or, with ``"summary": "kept"``, the last plan's summary as
stored, settled by its grants), its row stored with the rates counted in force; a leave
takes the rows' allocations out of the sums. After every step it checks what the quota
bound rests on: the sums in force equal the allocations of the rows counted in the group.

A case's file: ``quota`` (of the group's first dimension; the others are unlimited),
``rows`` (reporter: ``{"namespace", "demand", "allocation"}``), ``steps`` (each a
``{"report": id, "namespace", "demand", "applied"?, "says"?, "summary"?}``, a
``{"leave": [ids]}`` or a ``{"quota": q}``, with ``"expect"``: any of ``rate``, ``counted``,
``fair``, ``in_force``, ``early``, ``woken``), and ``bound``: ``{"ratio", "from"}``, the
most the sums in force may be of the quota after every step from step ``from`` on, and
``checks``, which bound that is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.quota import planner
from app.quota.levels import GroupSummary
from app.quota.types import Figures
from rgspark.wire import DIMENSIONS, UNKNOWN_DEMAND

CASES = sorted((Path(__file__).parent / "planner_cases").glob("*.json"))
TOLERANCE = 1e-6  # relative: the cases' figures are rounded to seven digits
_UNLIMITED = (0.0, 0.0, None) * (len(DIMENSIONS) - 1)


def _figures(demand: float, allocation: float | None) -> Figures:
    usage = min(demand, allocation or 0.0)
    return (usage, demand, allocation, *_UNLIMITED)


def _demand(raw: Any) -> float:
    return UNKNOWN_DEMAND if raw == "unknown" else float(raw)


@dataclass
class _Group:
    """A group as the store holds it: its rows, sums in force and stored summary."""

    quota: float
    rows: dict[str, tuple[str, Figures]]
    in_force: list[float] = field(default_factory=list)
    summary: GroupSummary | None = None

    def counted(self) -> list[float]:
        allocations = [planner.allocations_of(figures) for _, figures in self.rows.values()]
        return planner.count(("g", rates) for rates in allocations).get(
            "g", [0.0] * len(DIMENSIONS)
        )


def _report(group: _Group, step: dict[str, Any]) -> dict[str, Any]:
    """Plan one report, as `app.quota.store` does; returns what it granted."""
    reporter, namespace = step["report"], step["namespace"]
    stored = group.rows.get(reporter)
    had = None if stored is None else stored[1][2]
    applied = step.get("applied")
    # A fall it says it applied is in force at the new rate (`app.quota.figures.released`).
    in_force = applied if applied is not None and had is not None and applied < had else had
    figures = _figures(_demand(step["demand"]), in_force)
    says = step.get("says", True)
    enforced = (in_force if says else None,) + (None,) * (len(DIMENSIONS) - 1)
    member = planner.Member(namespace, None if stored is None else stored[1], figures, enforced)
    quotas = (group.quota,) + (None,) * (len(DIMENSIONS) - 1)
    summary = group.summary
    if step.get("summary") == "kept" and summary is not None and summary.quotas == quotas:
        summary = summary.updated([member.stored], [member.figures])
    else:
        peers = [(r, ns, f) for r, (ns, f) in group.rows.items() if r != reporter]
        summary = planner.summarize(0, quotas, peers, [member])
    planned = planner.plan(summary, group.in_force, [member], paced=False)
    counted = planned.counted.get(0) or planned.rates[0]
    group.rows[reporter] = (namespace, _figures(figures[1], counted[0]))
    group.in_force = planned.in_force
    group.summary = GroupSummary.from_json(summary.to_json(planned.shortfalls))
    return {
        "rate": planned.rates[0][0],
        "counted": counted[0],
        "fair": planned.fairs[0][0],
        "in_force": planned.in_force[0],
        "early": planned.early,
    }


def _leave(group: _Group, reporters: list[str]) -> dict[str, Any]:
    leaving = [group.rows.pop(reporter) for reporter in reporters]
    left = planner.count(("g", planner.allocations_of(figures)) for _, figures in leaving)
    group.in_force, woken = planner.take(group.in_force, left.get("g", [0.0] * len(DIMENSIONS)))
    return {"in_force": group.in_force[0], "woken": woken}


def _step(group: _Group, step: dict[str, Any]) -> dict[str, Any]:
    if "report" in step:
        return _report(group, step)
    if "leave" in step:
        return _leave(group, step["leave"])
    group.quota = float(step["quota"])
    return {"in_force": group.in_force[0]}


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or expected is None:
        return bool(got is expected)
    return math.isclose(got, expected, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_a_case(path: Path) -> None:
    case = json.loads(path.read_text())
    rows = {
        reporter: (row["namespace"], _figures(_demand(row["demand"]), row["allocation"]))
        for reporter, row in case["rows"].items()
    }
    group = _Group(float(case["quota"]), rows)
    group.in_force = group.counted()
    bound = case["bound"]
    for number, step in enumerate(case["steps"]):
        got = _step(group, step)
        wrong = {
            name: (got[name], value)
            for name, value in step.get("expect", {}).items()
            if not _same(got[name], value)
        }
        assert not wrong, f"step {number} {step}: (got, expected) {wrong}"
        # What the bound rests on: the sums count exactly the rows counted in the group.
        assert group.in_force == pytest.approx(group.counted(), rel=1e-12, abs=1e-9), number
        if number >= bound.get("from", 0):
            ratio = group.in_force[0] / group.quota
            assert ratio <= bound["ratio"] + 1e-12, f"step {number}: {ratio:.4f} of the quota"


def test_every_case_says_which_bound_it_checks() -> None:
    assert len(CASES) >= 8
    for path in CASES:
        case = json.loads(path.read_text())
        assert case["checks"] and case["bound"]["ratio"] >= 1.0, path.name
        assert any("expect" in step for step in case["steps"]), path.name


def test_a_leave_never_takes_the_sums_below_zero_and_wakes_on_a_fiftieth() -> None:
    sums, woken = planner.take([100.0, 0.0, 5.0, 0.0], [1.0, 0.0, 9.0, 0.0])
    assert (sums, woken) == ([99.0, 0.0, 0.0, 0.0], True)  # 9 of 5 is more than a fiftieth
    assert planner.take([100.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0])[1] is False
    assert planner.take([100.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0])[1] is True
