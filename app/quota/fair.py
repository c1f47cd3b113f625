"""Max-min fair shares: the split every allocation here is measured against."""

from __future__ import annotations

import math
from collections.abc import Sequence


def water_level(quota: float, demands: Sequence[float]) -> float:
    """The level of `max_min_fair`: ``math.inf`` when the demands add up to no more than
    ``quota`` (each gets all it wants), else the level at which ``min(d_i, level)`` add up to
    it."""
    remaining = float(quota)
    waiting = sorted(demands)
    for position, demand in enumerate(waiting):
        level = remaining / (len(waiting) - position)
        if demand > level:
            return level
        remaining -= demand
    return math.inf


def max_min_fair(quota: float, demands: Sequence[float]) -> list[float]:
    """Split ``quota`` over ``demands`` max-min fairly (water-filling); shares in input order.

    Each share is ``min(d_i, level)``, where the level is the one at which the shares add up
    to the quota, or every demand in full when they add up to no more than the quota: those
    who want less than an equal share get what they want and the rest is split equally among
    the others. Doorman's example: 120 over demands 1000, 50 and 10 gives 60, 50 and 10.
    A demand may be ``math.inf`` (unbounded).
    """
    level = water_level(quota, demands)
    return [min(demand, level) for demand in demands]
