"""Answers laid out from parts kept serialized read back, with the models the API documents,
as exactly what pydantic writes for them."""

from __future__ import annotations

import json

import pytest

from app.quota import answers
from app.quota.schemas import NamespaceAllocation, ReportResult
from app.schemas import ResourceGroupRead

LIMITS = ResourceGroupRead(
    publishRateInMsgs=1000,
    publishRateInBytes=-1,
    dispatchRateInMsgs=-1,
    dispatchRateInBytes=5_000_000,
    replicationDispatchRateInMsgs=-1,
    replicationDispatchRateInBytes=-1,
)


@pytest.mark.parametrize("accepted", [True, False])
def test_an_answer_is_what_pydantic_writes_for_its_model(accepted: bool) -> None:
    parts = [
        answers.namespace_part(
            "t/ns", "rg", LIMITS.model_dump_json().encode(), (250.5, None, 1e-7, 3.0), (500.0,) * 4
        ),
        answers.namespace_part('t/é "x"', None, b"null", (None,) * 4, (None,) * 4),
    ]
    written = answers.result(
        b",".join(parts),
        accepted=accepted,
        report_interval_ms=125,
        report_period_ms=1000,
        lease_ms=8000,
    )
    model = ReportResult.model_validate_json(written)
    assert written == model.model_dump_json().encode()
    assert model.accepted is accepted and model.leaseMs == 8000 and model.confirmFalls
    assert model.namespaces["t/ns"] == NamespaceAllocation(
        resourceGroup="rg",
        limits=LIMITS,
        allocations={
            "publishMsgs": 250.5,
            "publishBytes": -1,
            "dispatchMsgs": 1e-7,
            "dispatchBytes": 3.0,
        },
        fallbackAllocations=dict.fromkeys(
            ["publishMsgs", "publishBytes", "dispatchMsgs", "dispatchBytes"], 500.0
        ),
    )
    assert json.loads(written)["namespaces"]['t/é "x"']["resourceGroup"] is None


def test_an_answer_of_no_namespaces_is_one_too() -> None:
    written = answers.result(
        b"", accepted=True, report_interval_ms=1, report_period_ms=1, lease_ms=1
    )
    assert written == ReportResult.model_validate_json(written).model_dump_json().encode()
