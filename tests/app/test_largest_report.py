"""The largest report the spec allows (10,000 namespaces), from a role that is not a
superuser, on both databases: its rights are checked by statements whose size does not grow
with the report (PostgreSQL refused a `(tenant, namespace) IN (...)` of 10,000 pairs as too
deep, and the server logged it as an outage)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from app.models import Namespace, NamespacePermission
from app.quota.schemas import MAX_NAMESPACES_PER_REPORT
from tests.factories import create_group, create_tenant

Auth = Callable[[str], dict[str, str]]
NAMES = [f"ns{i:05d}" for i in range(MAX_NAMESPACES_PER_REPORT)]


@pytest.fixture
def world(client: TestClient, engine: Engine) -> None:
    """Tenant ``t`` (administered by ``tenant-admin``) with the most namespaces a report
    may name, all under group ``rg``; role ``job`` may produce to all but the last."""
    create_group(client, "rg", publishRateInMsgs=1000)
    create_tenant(client, "t", ["tenant-admin"])
    with engine.begin() as connection:
        connection.execute(
            insert(Namespace),
            [{"tenant": "t", "name": name, "resource_group": "rg"} for name in NAMES],
        )
        connection.execute(
            insert(NamespacePermission),
            [
                {"tenant": "t", "namespace": name, "role": "job", "actions": ["produce"]}
                for name in NAMES[:-1]
            ],
        )


def everything(names: list[str]) -> dict[str, Any]:
    usage = {"publishMsgs": {"used": 1, "demand": 1}}
    return {
        "sentAtMs": round(time.time() * 1000),
        "intervalMs": 1000,
        "namespaces": {f"t/{name}": usage for name in names},
    }


@pytest.mark.usefixtures("world")
@pytest.mark.parametrize("role", ["job", "tenant-admin"])
def test_a_report_of_the_most_namespaces_is_answered(app: FastAPI, auth: Auth, role: str) -> None:
    names = NAMES if role == "tenant-admin" else NAMES[:-1]
    response = TestClient(app).post(
        f"/quota/v1/reporters/{role}/reports", json=everything(names), headers=auth(role)
    )
    assert response.status_code == 200, response.text[:300]
    answered = response.json()["namespaces"]
    assert len(answered) == len(names)
    assert {entry["resourceGroup"] for entry in answered.values()} == {"rg"}


@pytest.mark.usefixtures("world")
def test_one_namespace_without_rights_among_the_most_is_refused(app: FastAPI, auth: Auth) -> None:
    response = TestClient(app).post(
        "/quota/v1/reporters/r/reports", json=everything(NAMES), headers=auth("job")
    )
    assert response.status_code == 403, response.text[:300]
    assert response.json()["reason"] == (
        f"Role job may not report for namespace t/{NAMES[-1]}: it needs the produce or consume "
        "permission"
    )
