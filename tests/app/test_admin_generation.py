"""Every write to groups, tenants and namespaces changes the admin generation (by triggers),
on both databases: what lets server processes keep namespaces' groups in memory."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, text

from app.models import AdminGeneration


def generation(engine: Engine) -> int | None:
    with engine.connect() as connection:
        return connection.scalar(select(AdminGeneration.token).where(AdminGeneration.id == 1))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/admin/v2/resourcegroups/new", {"publishRateInMsgs": 5}),
        ("PUT", "/admin/v2/resourcegroups/rg", {"publishRateInMsgs": 7}),
        ("DELETE", "/admin/v2/resourcegroups/spare", None),
        ("PUT", "/admin/v2/tenants/other", {"adminRoles": []}),
        ("POST", "/admin/v2/tenants/t/resourcegroup/rg", None),
        ("PUT", "/admin/v2/namespaces/t/new", None),
        ("POST", "/admin/v2/namespaces/t/ns/resourcegroup/rg", None),
        ("DELETE", "/admin/v2/namespaces/t/ns", None),
    ],
)
def test_admin_writes_change_the_generation(
    client: TestClient, engine: Engine, method: str, path: str, body: Any
) -> None:
    for setup, target, payload in (
        ("PUT", "/admin/v2/resourcegroups/rg", {"publishRateInMsgs": 1}),
        ("PUT", "/admin/v2/resourcegroups/spare", {"publishRateInMsgs": 1}),
        ("PUT", "/admin/v2/tenants/t", {"adminRoles": []}),
        ("PUT", "/admin/v2/namespaces/t/ns", None),
    ):
        assert client.request(setup, target, json=payload).status_code == 204
    before = generation(engine)
    response = client.request(method, path, json=body)
    assert response.status_code == 204, response.text
    assert generation(engine) not in (before, None)


def test_a_write_by_hand_changes_it_too(client: TestClient, engine: Engine) -> None:
    client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 1})
    before = generation(engine)
    with engine.begin() as connection:
        connection.execute(text("UPDATE resource_groups SET publish_rate_in_msgs = 2"))
    assert generation(engine) not in (before, None)
