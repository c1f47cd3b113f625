"""Units counted per group (`app.quota.counts`): spread over the time they were used in, in
buckets of the history's resolution, taken once no report can add to them."""

from __future__ import annotations

import pytest

from app.quota.counts import Bucket, UsageCounter

RESOLUTION_S = 10.0
SPAN_S = 10.0
NOW = 1_800_000_025.0  # 5 s into a bucket


def counter() -> UsageCounter:
    return UsageCounter(RESOLUTION_S, SPAN_S)


def units_by_start(buckets: list[Bucket]) -> dict[float, tuple[float, ...]]:
    return {bucket.start: bucket.units for bucket in buckets}


def test_a_report_is_spread_over_the_time_it_covers() -> None:
    counted = counter()
    # 800 msgs over the 8 s to NOW: 3 s in the bucket before NOW's, 5 s in NOW's.
    counted.add({"rg": [800.0, 8000.0, 0.0, 0.0]}, now=NOW, covered_s=8.0)
    found = units_by_start(counted.take_all())
    assert found[NOW - 15] == pytest.approx((300.0, 3000.0, 0.0, 0.0))
    assert found[NOW - 5] == pytest.approx((500.0, 5000.0, 0.0, 0.0))
    assert sum(units[0] for units in found.values()) == pytest.approx(800.0)


def test_a_bucket_is_taken_once_no_report_can_cover_it() -> None:
    counted = counter()
    counted.add({"rg": [100.0, 0.0, 0.0, 0.0]}, now=NOW, covered_s=1.0)
    bucket_end = NOW + 5
    assert counted.complete(bucket_end + SPAN_S - 0.001) == []
    assert units_by_start(counted.complete(bucket_end + SPAN_S)) == {
        NOW - 5: pytest.approx((100.0, 0.0, 0.0, 0.0))
    }
    assert counted.complete(bucket_end + SPAN_S) == []  # taken once


def test_a_report_covering_longer_than_the_span_counts_all_its_units_in_the_span() -> None:
    counted = counter()
    # A worker cut off from the server for a minute reports it all at once.
    counted.add({"rg": [6000.0, 0.0, 0.0, 0.0]}, now=NOW, covered_s=60.0)
    found = units_by_start(counted.take_all())
    assert set(found) == {NOW - 15, NOW - 5}
    assert sum(units[0] for units in found.values()) == pytest.approx(6000.0)


def test_totals_are_counters_of_every_unit() -> None:
    counted = counter()
    seen = []
    for step, used in enumerate((20.0, 180.0, 0.0, 1600.0)):
        counted.add(
            {"rg": [used, 0.0, 0.0, 0.0], "other": [1.0] * 4}, now=NOW + step, covered_s=0.005
        )
        seen.append(counted.totals()["rg"][0])
    assert seen == [20.0, 200.0, 200.0, 1800.0]
    assert counted.totals()["other"] == (4.0, 4.0, 4.0, 4.0)
    counted.take_all()
    assert counted.totals()["rg"][0] == 1800.0  # written buckets leave the counters be


def test_buckets_whose_write_failed_are_counted_again() -> None:
    counted = counter()
    counted.add({"rg": [100.0, 0.0, 0.0, 0.0]}, now=NOW, covered_s=1.0)
    taken = counted.take_all()
    counted.add({"rg": [50.0, 0.0, 0.0, 0.0]}, now=NOW, covered_s=1.0)
    counted.put_back(taken)
    assert units_by_start(counted.take_all()) == {NOW - 5: pytest.approx((150.0, 0.0, 0.0, 0.0))}
