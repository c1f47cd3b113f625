"""A report's answer as JSON, from parts kept serialized.

A broker's answer names thousands of namespaces, and a steady reporter's is its last one
again. So each namespace's part is written once, when its plan or its group changes
(`app.quota.cache.Answer`), and an answer is a head and those parts, joined: the parts are
never parsed or written again. pydantic writes every value (`pydantic_core.to_json`); this
module only lays them out as the models `ReportResult` and `NamespaceAllocation` do, which
`tests/app/test_answers.py` checks by reading answers back with them.
"""

from __future__ import annotations

from pydantic_core import to_json

from app.quota.types import Rates
from rgspark.wire import DIMENSIONS, ENFORCE, UNLIMITED_ALLOCATION

__all__ = ["namespace_part", "result"]


def namespace_part(
    ref: str,
    group: str | None,
    limits: bytes,
    allocations: Rates,
    fallbacks: Rates,
    mode: str = ENFORCE,
) -> bytes:
    """One namespace's entry of `ReportResult.namespaces`, its ``"name":{...}``: ``limits``
    is the JSON of the group's limits (``null`` for none), written once per group."""
    return (
        b'%s:{"resourceGroup":%s,"limits":%s,"allocations":%s,"fallbackAllocations":%s,'
        b'"mode":%s}'
        % (
            to_json(ref),
            to_json(group),
            limits,
            to_json(_by_dimension(allocations)),
            to_json(_by_dimension(fallbacks)),
            to_json(mode),
        )
    )


def result(
    namespaces: bytes,
    *,
    accepted: bool,
    report_interval_ms: int,
    report_period_ms: int,
    lease_ms: int,
) -> bytes:
    """A `ReportResult`'s JSON: its head, then ``namespaces``, their parts joined."""
    return (
        b'{"accepted":%s,"reportIntervalMs":%d,"reportPeriodMs":%d,"leaseMs":%d,'
        b'"confirmFalls":true,"namespaces":{%s}}'
        % (
            b"true" if accepted else b"false",
            report_interval_ms,
            report_period_ms,
            lease_ms,
            namespaces,
        )
    )


def _by_dimension(rates: Rates) -> dict[str, float]:
    return {
        name: UNLIMITED_ALLOCATION if rate is None else rate
        for name, rate in zip(DIMENSIONS, rates, strict=True)
    }
