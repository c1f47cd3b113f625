"""Max-min fair shares: the split every allocation here is measured against."""

from __future__ import annotations

from collections.abc import Sequence


def max_min_fair(quota: float, demands: Sequence[float]) -> list[float]:
    """Split ``quota`` over ``demands`` max-min fairly (water-filling); shares in input order.

    Each share is ``min(d_i, level)``, where the level is the one at which the shares add up
    to the quota, or every demand in full when they add up to no more than the quota: those
    who want less than an equal share get what they want and the rest is split equally among
    the others. Doorman's example: 120 over demands 1000, 50 and 10 gives 60, 50 and 10.
    A demand may be ``math.inf`` (unbounded).
    """
    shares = [0.0] * len(demands)
    remaining = float(quota)
    waiting = sorted(range(len(demands)), key=lambda i: demands[i])
    for position, index in enumerate(waiting):
        level = remaining / (len(waiting) - position)
        if demands[index] > level:
            for rest in waiting[position:]:
                shares[rest] = level
            break
        shares[index] = demands[index]
        remaining -= demands[index]
    return shares
