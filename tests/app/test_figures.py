"""Which reported demands count as held (`rgspark.wire.demand_range`): by the server, and
by rgspark deciding to report early."""

from __future__ import annotations

import math

from rgspark.wire import UNKNOWN_DEMAND, demand_range


def held(stored: float, share: float | None, demand: float) -> bool:
    low, high = demand_range(stored, share)
    return low <= demand <= high


def test_a_dimension_the_group_does_not_limit_holds_any_demand() -> None:
    assert held(100.0, None, 0.0)
    assert held(100.0, None, 1e9)


def test_above_its_share_any_demand_above_the_share_is_held() -> None:
    assert held(800.0, 500.0, 5_000.0)
    assert held(800.0, 500.0, 500.0)
    assert not held(800.0, 500.0, 499.0)  # under its share: its grant changes


def test_just_above_its_share_the_five_percent_rule_still_holds() -> None:
    # Jitter of a few percent around a share just under the stored demand is no move.
    assert held(100.0, 98.0, 96.0)
    assert not held(100.0, 98.0, 94.0)


def test_at_or_under_its_share_a_demand_moves_by_five_percent() -> None:
    for share in (100.0, 150.0):
        assert held(100.0, share, 104.0)
        assert not held(100.0, share, 106.0)
        assert not held(100.0, share, 94.0)


def test_an_unknown_demand_is_recorded_once_measured() -> None:
    assert not held(UNKNOWN_DEMAND, 500.0, 800.0)
    assert demand_range(UNKNOWN_DEMAND, 500.0)[1] < math.inf
