"""What a server process remembers of reporters is bounded by their namespaces, summed
(`RG_REPORT_CACHE_NAMESPACES`): past it the least recently reporting are forgotten, and
their next reports, read from the database again, are answered as before (both databases)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.state import state_of
from tests.conftest import SUPERUSER, make_settings
from tests.factories import create_group, create_namespace, create_tenant, running_app

Auth = Callable[[str], dict[str, str]]
NAMESPACES = ["t/a", "t/b", "t/c"]


@pytest.fixture
def bounded(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[FastAPI]:
    """The app remembering 5 reporter namespaces at most; group ``rg`` on three namespaces."""
    settings = make_settings(database_url, secret_key, report_cache_namespaces=5)
    with running_app(settings) as app:
        yield app


def report(app: FastAPI, auth: Auth, reporter: str) -> dict[str, Any]:
    usage = {"publishMsgs": {"used": 100, "demand": 100}}
    body = {
        "sentAtMs": round(time.time() * 1000),
        "intervalMs": 1000,
        "namespaces": {name: usage for name in NAMESPACES},
    }
    response = TestClient(app).post(
        f"/quota/v1/reporters/{reporter}/reports", json=body, headers=auth("job")
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()["namespaces"]
    return {name: answer[name]["allocations"]["publishMsgs"] for name in NAMESPACES}


def test_the_least_recent_reporters_are_forgotten_and_answered_alike(
    bounded: FastAPI, auth: Auth
) -> None:
    admin = TestClient(bounded, headers=auth(SUPERUSER))
    create_group(admin, "rg", publishRateInMsgs=600)
    create_tenant(admin, "t")
    for name in NAMESPACES:
        create_namespace(admin, name, group="rg", producers=["job"])
    cache = state_of(bounded).report_cache

    report(bounded, auth, "r1")
    assert cache.namespaces == 3
    report(bounded, auth, "r2")  # 6 namespaces: r1 is forgotten
    assert cache.namespaces == 3
    assert cache.lease("r1") is None
    assert cache.lease("r2") is not None

    # r1, read from the database again, gets what two reporters of equal demand get.
    again = report(bounded, auth, "r1")
    assert again == report(bounded, auth, "r2") == {name: 100.0 for name in NAMESPACES}
    assert cache.namespaces <= 5
