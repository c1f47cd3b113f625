"""The allocator on hand-computed cases, applied one report at a time as the store applies it."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import NamedTuple

import pytest

from app.quota.allocator import granted, summarize_columns
from app.quota.fair import max_min_fair
from rgspark._quota import NamespaceQuota
from rgspark.wire import BURST_S, UNKNOWN_DEMAND, held_range, moved

# reporter -> (demand, allocation in force)
State = dict[str, tuple[float, float | None]]


class Grant(NamedTuple):
    """What `granted` returns."""

    rate: float
    fair: float
    early: bool


def plan(
    quota: float, state: State, namespaces: Mapping[str, str] | None = None
) -> dict[str, Grant]:
    """Each reporter's grant as if it were the one reporting now, as the store makes it: from
    the group's levels (`summarize_columns`, each reporter in its namespace: ``namespaces``,
    one for all by default) and the sum of the allocations in force. A group nobody reports
    in is never planned: no grants."""
    if not state:
        return {}
    spaces = [(namespaces or {}).get(reporter, "") for reporter in state]
    demands = [demand for demand, _ in state.values()]
    allocations = [allocation for _, allocation in state.values()]
    levels = summarize_columns(quota, spaces, demands, allocations)
    in_force = sum(allocation or 0.0 for allocation in allocations)
    return {
        reporter: Grant(*granted(levels, levels.shortfall, space, demand, allocation, in_force))
        for reporter, space, demand, allocation in zip(
            state, spaces, demands, allocations, strict=True
        )
    }


def allocate(quota: float, state: State) -> dict[str, float]:
    return {reporter: grant.rate for reporter, grant in plan(quota, state).items()}


def report(quota: float, state: State, reporter: str, demand: float) -> float:
    """`reporter` reports `demand`; the store stores and answers its own entry only."""
    state[reporter] = (demand, state[reporter][1] if reporter in state else None)
    rate = allocate(quota, state)[reporter]
    state[reporter] = (demand, rate)
    return rate


def in_force(state: State) -> dict[str, float]:
    return {r: pytest.approx(a) for r, (_, a) in state.items()}


class TestMaxMinFair:
    def test_doormans_example(self) -> None:
        assert max_min_fair(120, [1000, 50, 10]) == [60, 50, 10]

    def test_everyone_satisfied_leaves_the_rest(self) -> None:
        assert max_min_fair(1000, [300, 100]) == [300, 100]

    def test_unbounded_demands_split_equally(self) -> None:
        assert max_min_fair(900, [math.inf, 100, math.inf]) == [400, 100, 400]


class TestLevelsWhateverTheOrder:
    # Three demands that fit in their sum, whose running sum in one order rounded to a
    # level just under the largest: summarized with the reporters in every order, the
    # levels must be the same, or each summary moves the shares and wakes the group.
    WANTS = (800.0, 3.3333333333333335, 0.3333333333333333)

    @pytest.mark.parametrize("order", [(0, 1, 2), (1, 2, 0), (2, 1, 0), (1, 0, 2)])
    def test_demands_that_fit_are_met_in_every_order(self, order: tuple[int, ...]) -> None:
        demands = [self.WANTS[i] for i in order]
        levels = summarize_columns(1000.0, ["t/a"] * 3, demands, [None] * 3)
        assert levels.namespace_levels == {"t/a": math.inf}
        assert levels.group_level == math.inf

    @pytest.mark.parametrize("order", [(0, 1, 2), (1, 2, 0), (2, 1, 0)])
    def test_namespaces_that_fit_are_met_in_every_order(self, order: tuple[int, ...]) -> None:
        demands = [self.WANTS[i] for i in order]
        namespaces = ["t/a", "t/b", "t/b"]
        levels = summarize_columns(1000.0, namespaces, demands, [None] * 3)
        assert levels.group_level == math.inf
        assert set(levels.namespace_levels.values()) == {math.inf}


class TestNamespacesFirst:
    """The quota is split between namespaces by their total demand, then within each."""

    def test_head_count_does_not_win(self) -> None:
        # One process in "a" against fifty in "b", all wanting more than there is.
        state: State = {"a-1": (800, None), **{f"b-{i}": (100, None) for i in range(50)}}
        shares = plan(1000, state, {r: r[0] for r in state})
        assert shares["a-1"].fair == pytest.approx(500)
        assert sum(shares[f"b-{i}"].fair for i in range(50)) == pytest.approx(500)

    def test_a_namespace_wanting_less_leaves_the_rest_to_the_other(self) -> None:
        state: State = {
            "a-1": (100, None),
            "a-2": (50, None),
            "b-1": (900, None),
            "b-2": (300, None),
        }
        shares = plan(1000, state, {r: r[0] for r in state})
        # "a" wants 150 < 500: it gets it all; "b" splits 850 max-min: 550 and 300.
        assert [shares[r].fair for r in state] == pytest.approx([100, 50, 550, 300])

    def test_a_newcomer_probes_with_a_share_of_its_namespace_not_of_every_process(
        self,
    ) -> None:
        # Fifty processes of "b" hold the whole quota; "a" arrives, its demand unknown: its
        # fair share is half the quota, and its probe 2% of that, not 2% of a 51st.
        state: State = {f"b-{i}": (100, 20) for i in range(50)}
        state["a-1"] = (UNKNOWN_DEMAND, None)
        grant = plan(1000, state, {r: r[0] for r in state})["a-1"]
        assert grant.fair == pytest.approx(500)
        assert grant.rate == pytest.approx(10)

    def test_an_idle_reporter_holds_only_the_floor_and_growth_room(self) -> None:
        # Demand 0 (idle for a whole interval) is known: the busy one's share is the rest.
        shares = plan(1000, {"idle": (0, 500), "busy": (800, 500)}, {"idle": "a", "busy": "a"})
        assert shares["idle"].fair == pytest.approx(5)
        assert shares["busy"].fair == pytest.approx(800)
        assert shares["idle"].rate < 10


class TestSplit:
    def test_equal_split(self) -> None:
        state: State = {"a": (800, 500), "b": (800, 500)}
        assert allocate(1000, state) == {"a": 500, "b": 500}

    def test_doormans_example(self) -> None:
        state: State = {"big": (1000, 60), "mid": (50, 50), "small": (10, 10)}
        assert allocate(120, state) == {"big": 60, "mid": 50, "small": 10}

    def test_doormans_example_from_a_cold_start(self) -> None:
        state: State = {"big": (1000, None), "mid": (50, None), "small": (10, None)}
        assert allocate(120, state) == {"big": 60, "mid": 50, "small": 10}

    def test_spare_quota_is_growth_room_and_the_rest_stays_free(self) -> None:
        # 600 spare over 400 wanted: each may grow by a quarter, 100 stays free.
        state: State = {"a": (300, 0.0), "b": (100, 0.0)}
        assert allocate(1000, state) == {"a": 375, "b": 125}

    def test_an_idle_reporter_keeps_a_trickle_not_the_quota(self) -> None:
        # Floor: 1% of an equal share, 5; the 195 spare over 805 is under a quarter each.
        state: State = {"idle": (0, 500), "busy": (800, 500)}
        assert report(1000, state, "idle", 0) == pytest.approx(5 * 1000 / 805)
        assert report(1000, state, "busy", 800) == pytest.approx(800 * 1000 / 805)

    def test_a_throttled_reporter_grows_by_its_demand_not_its_usage(self) -> None:
        # b used only its 100 but was held back from 900; a now wants 100. Usage is not
        # among what a grant is made from.
        state: State = {"a": (100, 100), "b": (900, 100)}
        assert allocate(1000, state) == {"a": 100, "b": 900}
        assert report(1000, state, "b", 900) == 900


class TestChanges:
    def test_join(self) -> None:
        state: State = {"a": (800, 500), "b": (800, 500)}
        # Nothing is free: the newcomer starts on a probe, 2% of an equal share, at once.
        assert report(1000, state, "c", math.inf) == pytest.approx(1000 / 3 * 0.02)
        # The others drop to a third when they report; then the newcomer rises into it.
        assert report(1000, state, "a", 800) == pytest.approx(1000 / 3)
        assert report(1000, state, "b", 800) == pytest.approx(1000 / 3)
        assert report(1000, state, "c", 800) == pytest.approx(1000 / 3)
        assert in_force(state) == {"a": 1000 / 3, "b": 1000 / 3, "c": 1000 / 3}

    def test_a_newcomer_alone_gets_the_quota(self) -> None:
        assert report(1000, {}, "a", math.inf) == 1000

    def test_leave_frees_the_share_at_once(self) -> None:
        third = 1000 / 3
        state: State = {"a": (800, third), "b": (800, third), "c": (800, third)}
        del state["c"]
        assert allocate(1000, state) == {"a": pytest.approx(500), "b": pytest.approx(500)}

    def test_increases_wait_for_headroom(self) -> None:
        state: State = {"a": (900, 900), "b": (100, 100)}
        # b wants more, but a's 900 is still in force: b waits, and is told to come back soon.
        state["b"] = (900, 100)
        grant = plan(1000, state)["b"]
        assert (grant.rate, grant.fair, grant.early) == (100, 500, True)
        assert report(1000, state, "b", 900) == 100
        assert report(1000, state, "a", 100) == 100  # decreases apply at once
        assert report(1000, state, "b", 900) == 900

    def test_headroom_is_shared_by_shortfall_when_short(self) -> None:
        # Shares 450, 450, 100. 300 is free; a is 200 short and b 300: each gets 60% of its
        # shortfall, since c's drop is not free until c has reported it.
        state: State = {"a": (800, 250), "b": (800, 150), "c": (100, 300)}
        shares = allocate(1000, state)
        assert shares == {"a": pytest.approx(370), "b": pytest.approx(330), "c": 100}

    def test_quota_cut(self) -> None:
        state: State = {"a": (800, 500), "b": (800, 500)}
        assert allocate(300, state) == {"a": 150, "b": 150}

    def test_quota_raise(self) -> None:
        # 1600 wanted of 2000: each gets its demand plus a quarter.
        state: State = {"a": (800, 500), "b": (800, 500)}
        assert allocate(2000, state) == {"a": 1000, "b": 1000}


class TestEarlyReports:
    def test_settled_reporters_report_on_their_interval(self) -> None:
        grants = plan(1000, {"a": (800, 500), "b": (800, 500)})
        assert not grants["a"].early

    def test_newcomers_report_again_soon(self) -> None:
        grant = plan(1000, {"a": (800, 500), "b": (800, 500), "c": (UNKNOWN_DEMAND, None)})
        assert grant["c"].early

    def test_while_a_demand_is_unknown_those_held_to_a_share_report_soon(self) -> None:
        # c's demand is not known yet (1e18 is what a report carries for math.inf): a's share
        # grows if c wants little, while b, wanting little, has nothing to gain.
        state: State = {"a": (800, 495), "b": (10, 10), "c": (UNKNOWN_DEMAND, 10)}
        grants = plan(1000, state)
        assert grants["a"].early and not grants["b"].early


class TestBounds:
    def test_the_sum_in_force_exceeds_the_quota_only_by_newcomers_probes(self) -> None:
        rng = random.Random(7)
        for _ in range(100):
            quota = rng.uniform(10, 10_000)
            state: State = {}
            for _ in range(300):
                reporter = f"r{rng.randint(0, 7)}"
                if reporter in state and rng.random() < 0.1:
                    del state[reporter]  # released
                    continue
                demand = rng.choice([0.0, math.inf, rng.uniform(0, quota), 2 * quota])
                report(quota, state, reporter, demand)
                # Probes (2%), then floors for newcomers while the others have not
                # shrunk yet: at most 1% of the quota times ln 8 with up to 8 reporters.
                total = sum(a or 0.0 for _, a in state.values())
                assert total <= quota * (1.02 + 0.01 * math.log(8)) + 1e-9
                assert all(a is not None and a > 0 for _, a in state.values())

    def test_a_tenfold_crowd_of_newcomers_adds_at_most_floors_past_the_probes(self) -> None:
        state: State = {f"old{i}": (math.inf, 100.0) for i in range(10)}
        for i in range(90):
            report(1000, state, f"new{i}", math.inf)
        total = sum(a or 0.0 for _, a in state.values())
        assert 1020 < total <= 1000 * (1.02 + 0.01 * math.log(10))

    def test_every_answer_is_positive_and_the_answer_itself_fits(self) -> None:
        state: State = {"a": (0, None), "b": (0, None), "c": (5000, None)}
        shares = allocate(1000, state)
        assert all(rate > 0 for rate in shares.values())
        assert sum(shares.values()) <= 1000 * 1.02


class TestContract:
    def test_no_reports_no_allocations(self) -> None:
        assert allocate(1000, {}) == {}

    @pytest.mark.parametrize("quota", [0, -1, math.inf, math.nan])
    def test_unlimited_or_zero_quota_is_the_stores_business(self, quota: float) -> None:
        # The store treats -1 and 0 as unlimited before calling: no allocation to compute.
        with pytest.raises(ValueError, match="quota"):
            allocate(quota, {"a": (1, None)})

    # A reporter named twice is no case: the columns name no reporter (the store keeps one
    # row per reporter and namespace).
    @pytest.mark.parametrize("bad", [(-1, None), (math.nan, None), (1, -5)])
    def test_malformed_reports(self, bad: tuple[float, float | None]) -> None:
        with pytest.raises(ValueError):
            allocate(1000, {"a": bad})

    def test_the_bucket_holds_a_tenth_of_a_second(self) -> None:
        # A grant of 500 a second, as rgspark applies it: a burst of 50 after a long rest.
        now = 0
        quota = NamespaceQuota("t", "ns", clock=lambda: now)
        quota.apply({"publishMsgs": 500})
        now = 10 * 10**9
        assert 500 * BURST_S == 50
        assert quota.charge("publish", 50, 0) == 0
        assert quota.charge("publish", 1, 0) > 0


class TestHeldFigures:
    @pytest.mark.parametrize(
        ("before", "after", "is_moved"),
        [
            (100, 104.9, False),
            (100, 105.3, True),  # up: 5% of the figure after the move
            (100, 95.1, False),
            (100, 94.9, True),  # down: 5% of the figure before it
            (0.5, 0.549, False),  # under 1, 0.05 is the step
            (0.5, 0.551, True),
            (0, 0.049, False),
            (0, 0.051, True),
        ],
    )
    def test_moves_of_five_percent_are_news(
        self, before: float, after: float, is_moved: bool
    ) -> None:
        assert moved(before, after) is is_moved
        low, high = held_range(before)
        assert (not low <= after <= high) is is_moved

    def test_the_held_range_is_the_five_percent_rule(self) -> None:
        # Random figures across the scales reports carry, both sides of 1 included: the
        # range agrees with the rule as written wherever rounding cannot decide.
        rng = random.Random(5)
        checked = 0
        for _ in range(20_000):
            before = 10 ** rng.uniform(-3, 9) if rng.random() < 0.95 else 0.0
            after = max(0.0, before * rng.uniform(0.9, 1.1) + rng.uniform(-0.1, 0.1))
            low, high = held_range(before)
            if min(abs(after - low), abs(after - high)) <= 1e-9 * max(after, 1.0):
                continue
            rule = abs(after - before) > 0.05 * max(before, after, 1.0)
            assert rule is not (low <= after <= high), (before, after)
            checked += 1
        assert checked > 19_000
