"""A group's summary (`app.quota.levels`) and grants made from one a moment old: the quota
bound rests on the sums in force alone, and a summary survives its JSON."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from typing import TypeVar

import pytest

from app.quota.allocator import Levels, granted, summarize_columns
from app.quota.levels import DimensionSummary, GroupSummary
from app.quota.tuning import PROBE

QUOTA = 1000.0
T = TypeVar("T")


def test_grants_from_one_summary_are_each_reporter_s_own_plan() -> None:
    """Levels summarized once grant each reporter what a summary made as it reports would:
    the store's, which lists the others first and the reporter last."""
    rng = random.Random(7)
    namespaces = list("aabbbc")
    demands = [rng.uniform(0, 600) for _ in namespaces]
    allocations = [rng.choice([None, rng.uniform(0, 300)]) for _ in namespaces]
    levels = summarize_columns(QUOTA, namespaces, demands, allocations)
    in_force = sum(allocation or 0.0 for allocation in allocations)
    for i, (namespace, demand, allocation) in enumerate(
        zip(namespaces, demands, allocations, strict=True)
    ):
        own = summarize_columns(
            QUOTA, _last(namespaces, i), _last(demands, i), _last(allocations, i)
        )
        rate, fair, early = granted(
            levels, levels.shortfall, namespace, demand, allocation, in_force
        )
        planned = granted(own, own.shortfall, namespace, demand, allocation, in_force)
        assert (rate, fair) == pytest.approx(planned[:2])
        assert early is planned[2]


def _last(column: list[T], index: int) -> list[T]:
    """A column with the entry at ``index`` moved to its end."""
    return [*column[:index], *column[index + 1 :], column[index]]


@pytest.mark.parametrize("seed", range(20))
def test_stale_levels_never_lift_the_sum_in_force_past_the_quota(seed: int) -> None:
    """Levels summarized once, then many grants as reporters come and go and their demands
    move: each grant is applied as the store applies it (the sum in force moves by what it
    changed). Rises only take free headroom; newcomers' probes add 2% of the quota at most,
    and past that each newcomer its floor (a hundredth of an equal share)."""
    rng = random.Random(seed)
    allocations: dict[str, float | None] = {f"r{i}": None for i in range(8)}
    demands = {reporter: rng.uniform(0, 800) for reporter in allocations}
    levels = summarize_columns(QUOTA, [""] * len(demands), list(demands.values()), [None] * 8)
    in_force = 0.0
    newcomers = 0
    for step in range(400):
        reporter = rng.choice(sorted(allocations))
        if rng.random() < 0.05:  # a newcomer the summary never saw
            reporter = f"n{step}"
            allocations[reporter] = None
            newcomers += 1
        demands[reporter] = rng.uniform(0, 800)
        was, demand = allocations[reporter], demands[reporter]
        rate, _, _ = granted(levels, levels.shortfall, "", demand, was, in_force)
        in_force += rate - (was or 0.0)
        allocations[reporter] = rate
        levels = levels.with_shortfall(
            levels.settled_shortfall(levels.shortfall, "", demand, was, rate)
        )
        assert in_force == pytest.approx(sum(a or 0.0 for a in allocations.values()))
        assert in_force <= QUOTA * (1 + PROBE) + newcomers * levels.floor + 1e-6


def test_settled_moves_the_shortfall_by_what_a_grant_changed() -> None:
    levels = summarize_columns(QUOTA, ["", ""], [600.0, 600.0], [100.0, 100.0])
    assert levels.shortfall == pytest.approx(800)  # each wants 500, has 100
    after = levels.settled_shortfall(levels.shortfall, "", 600.0, 100.0, 500.0)
    assert after == pytest.approx(400)
    assert levels.settled_shortfall(after, "", 600.0, 100.0, 50.0) == pytest.approx(400 + 50)
    assert levels.with_shortfall(after).shortfall == after


def test_a_summary_survives_its_json() -> None:
    levels = summarize_columns(QUOTA, ["x", "y"], [50.0, math.inf], [40.0, None])
    summary = GroupSummary(
        marker=42,
        units=2,
        grants=1,
        reporters=2,
        dimensions=(DimensionSummary(levels, 30.0, 50.0), None, None, None),
    )
    assert GroupSummary.from_json(summary.to_json()) == summary
    quotas = (QUOTA, None, None, None)
    assert summary.holds(42, quotas, changing=False)
    # Changed (its marker moved, or the reporter's own figures): it holds for a
    # `SUMMARY_SHARE` of the reporters it saw, past its own first grant.
    big = replace(summary, units=64)
    assert big.holds(43, quotas, changing=False)
    assert big.holds(42, quotas, changing=True)
    assert not replace(big, grants=2).holds(43, quotas, changing=False)
    assert not summary.holds(43, quotas, changing=False)
    assert not summary.holds(42, quotas, changing=True)
    assert not summary.holds(42, (QUOTA / 2, None, None, None), changing=False)


def _dumped(summary: GroupSummary, shortfalls: list[float] | None = None) -> str:
    """A summary's JSON as `json.dumps` writes its array."""

    def levels(of: Levels, shortfall: float) -> list[object]:
        return [of.quota, of.group_level, of.namespace_levels, of.room, shortfall, of.unknown]

    raw: list[object] = [
        summary.marker,
        summary.units,
        summary.grants,
        summary.reporters,
        [
            None
            if d is None
            else [
                *levels(d.levels, d.levels.shortfall if shortfalls is None else shortfalls[i]),
                d.usage,
                d.demand,
            ]
            for i, d in enumerate(summary.dimensions)
        ],
    ]
    if summary.woken:
        raw.append([None if w is None else levels(w, w.shortfall) for w in summary.woken])
    return json.dumps(raw, separators=(",", ":"))


@pytest.mark.parametrize("seed", range(5))
def test_a_summary_reads_back_as_json_dumps_would_have_written_it(seed: int) -> None:
    rng = random.Random(seed)
    values = [math.inf, -math.inf, math.nan, 0.0, -0.0, 1e-7, 2.5e-05, 1e16, 1e300, 5e-324]

    def value() -> float:
        return rng.choice([*values, rng.random() * 1e6, rng.random()])

    def some_levels() -> Levels:
        namespaces = {f"t-{i}/n.{i}": value() for i in range(rng.randint(0, 3))}
        return Levels(value(), rng.randint(1, 9), value(), namespaces, value(), value(), True)

    for _ in range(500):
        summary = GroupSummary(
            rng.getrandbits(63),
            rng.randint(1, 99),
            rng.randint(0, 9),
            rng.randint(1, 9),
            tuple(
                None if rng.random() < 0.2 else DimensionSummary(some_levels(), value(), value())
                for _ in range(4)
            ),
            () if rng.random() < 0.5 else tuple(some_levels() for _ in range(4)),
        )
        shortfalls = [value() for _ in range(4)]
        # Every value back exactly, infinities and NaN included (NaN compared by its repr).
        assert repr(json.loads(summary.to_json())) == repr(json.loads(_dumped(summary)))
        written = summary.to_json(shortfalls)
        assert repr(json.loads(written)) == repr(json.loads(_dumped(summary, shortfalls)))
    # Other types than floats (a summary made by hand) too.
    odd = GroupSummary(
        1, 2, 0, 1, (DimensionSummary(Levels(1000, 2, math.inf, {"a/b": 5}, 1.25, 0, False), 3, 4),)
    )
    assert json.loads(odd.to_json()) == json.loads(_dumped(odd))


@pytest.mark.parametrize("woken", [False, True])
def test_a_summary_read_is_what_its_json_reads_and_holds(woken: bool) -> None:
    levels = summarize_columns(QUOTA, ["x", "y"], [50.0, 900.0], [40.0, None])
    summary = GroupSummary(
        marker=42,
        units=64,
        grants=1,
        reporters=2,
        dimensions=(DimensionSummary(levels, 30.0, 50.0), None, None, None),
        woken=(summarize_columns(QUOTA, ["x"], [50.0], [40.0]), None, None, None) if woken else (),
    )
    quotas = (QUOTA, None, None, None)
    for grants in (1, 2):
        text = replace(summary, grants=grants).to_json()
        stored = GroupSummary.from_json(text)
        for marker, changing, given in [
            (42, False, quotas),
            (43, False, quotas),
            (42, True, quotas),
            (42, False, (QUOTA / 2, None, None, None)),
        ]:
            kept, previous = GroupSummary.read(text, marker, given, changing=changing)
            holds = stored.holds(marker, given, changing=changing)
            assert kept == (stored if holds else None)
            assert previous == stored.as_previous()
