"""A namespace's pace (`app.quota.pacing`), on an injected clock: nil for a few workers,
enough to unload a saturated lane at once for thousands, and back down once they are
served with time to spare."""

from __future__ import annotations

import pytest

from app.quota.pacing import Pace
from app.quota.tuning import LEAST_PACE, SPREAD, UTILIZATION

INTERVAL_S = 1.0
SILENT_S = 10.0
BATCH = 32


def workers(count: int) -> list[str]:
    return [f"w{worker}" for worker in range(count)]


def storm(workers_: int, cost_s: float) -> Pace:
    """A lane whose ``workers_`` all reported at 0 and saturated it, each report costing
    ``cost_s``."""
    pace = Pace(INTERVAL_S, SILENT_S, now=0.0)
    for worker in workers(workers_):
        pace.heard(worker, 0.0)
    pace.stored(workers(BATCH), BATCH * cost_s, 0.0, saturated=True)
    return pace


def test_a_few_workers_are_not_paced() -> None:
    pace = Pace(INTERVAL_S, SILENT_S, now=0.0)
    now = 0.0
    for report in range(2000):  # 20 workers, a report a second each, each alone in its transaction
        now += 0.05
        worker = f"w{report % 20}"
        pace.heard(worker, now)
        pace.stored([worker], 0.003, now, saturated=False)
        assert pace.pace_s == 0.0


def test_a_saturated_lane_paces_its_workers_to_half_its_time() -> None:
    pace = storm(5000, cost_s=0.003)
    # Each of 5,000 workers reporting once a pace takes half the lane's time.
    assert pace.pace_s == pytest.approx(5000 * 0.003 / UTILIZATION)
    assert 5000 / pace.pace_s * 0.003 == pytest.approx(UTILIZATION)


def test_only_the_reports_it_holds_back_count_in_what_a_report_costs() -> None:
    """A storm of joins: each worker's first report costs five times a later one, and is
    not held back by the pace, which keeps the later ones to half the lane's time."""
    pace = Pace(INTERVAL_S, SILENT_S, now=0.0)
    for worker in workers(5000):
        pace.heard(worker, 0.0)
    # Joins alone teach the pace nothing: it cannot hold them back.
    pace.stored(workers(BATCH), BATCH * 0.015, 0.0, saturated=True, held_back=[])
    assert pace.pace_s == 0.0
    # A batch of 24 joins and 8 later reports of 3 ms each.
    pace.stored(workers(BATCH), 0.4, 0.0, saturated=True, held_back=[0.003] * 8)
    assert pace.pace_s == pytest.approx(5000 * 0.003 / UTILIZATION)


def test_the_pace_comes_down_once_the_lane_has_time_to_spare() -> None:
    pace = storm(1000, cost_s=0.005)
    first = pace.pace_s
    assert first == pytest.approx(10.0)
    # The workers come back a pace later, spread over it, each alone: the lane idles. The
    # pace stays until it has had its effect (it lasted as long as itself), then halves.
    now, paces = 0.0, []
    while now < 60:
        now += first / 1000
        worker = f"w{round(now * 1000) % 1000}"
        pace.heard(worker, now)
        pace.stored([worker], 0.001, now, saturated=False)
        paces.append((now, pace.pace_s))
    assert all(p == first for t, p in paces if t < first)
    assert any(p == first / 2 for _, p in paces)
    assert paces[-1][1] == 0.0  # under a tenth of an interval: none
    assert all(p == 0.0 or p >= LEAST_PACE * INTERVAL_S for _, p in paces)


def test_a_lane_kept_busy_keeps_its_pace() -> None:
    pace = storm(1000, cost_s=0.005)
    first, now = pace.pace_s, 0.0
    while now < 3 * first:  # busy 60% of the time, above the half it is paced to
        now += 0.1
        pace.stored(workers(10), 0.06, now, saturated=False)
    assert pace.pace_s == first


def test_workers_silent_past_their_lease_and_their_pace_are_gone() -> None:
    unpaced = Pace(INTERVAL_S, SILENT_S, now=0.0)
    unpaced.stored(workers(1000), 0.1, 0.0, saturated=False)
    unpaced.stored([], 0.0, SILENT_S - 0.1, saturated=False)
    assert not unpaced.idle
    unpaced.stored([], 0.0, SILENT_S + 0.1, saturated=False)
    assert unpaced.idle
    paced = storm(1000, cost_s=0.005)
    paced.stored(workers(1000), 0.1, 0.0, saturated=False)  # answered with a 10 s pace
    paced.stored([], 0.0, SILENT_S + 10.1, saturated=False)
    assert not paced.idle  # a paced worker may be silent for its pace too, however spread
    paced.stored([], 0.0, SILENT_S + 10 * (1 + SPREAD) + 0.1, saturated=False)
    assert paced.idle
