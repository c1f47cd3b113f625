"""Cached ResourceGroup reads never outlive a write, whichever process made it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.main import create_app
from tests.conftest import SUPERUSER, make_settings

Auth = Callable[[str], dict[str, str]]
GROUP = "/admin/v2/resourcegroups/rg"


@pytest.fixture
def other_server(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[FastAPI]:
    """A second server on the same database, as another worker process would be."""
    app = create_app(make_settings(database_url, secret_key))
    yield app
    app.state.engine.dispose()


def test_a_write_elsewhere_is_seen_by_the_next_read(
    client: TestClient, other_server: FastAPI, auth: Auth
) -> None:
    other = TestClient(other_server, headers=auth(SUPERUSER))
    assert client.get(GROUP).status_code == 404
    other.put(GROUP, json={"publishRateInMsgs": 1})
    assert client.get(GROUP).json()["publishRateInMsgs"] == 1
    for rate in (2, 3, 4):
        other.put(GROUP, json={"publishRateInMsgs": rate})
        assert client.get(GROUP).json()["publishRateInMsgs"] == rate
    other.delete(GROUP)
    assert client.get(GROUP).status_code == 404


def test_who_may_read_follows_attachments_made_elsewhere(
    client: TestClient, other_server: FastAPI, auth: Auth
) -> None:
    other = TestClient(other_server, headers=auth(SUPERUSER))
    other.put(GROUP, json={})
    other.put("/admin/v2/tenants/t", json={"adminRoles": ["tenant-admin"]})
    other.put("/admin/v2/namespaces/t/ns")
    admin = auth("tenant-admin")
    assert client.get(GROUP, headers=admin).status_code == 403
    other.post("/admin/v2/namespaces/t/ns/resourcegroup/rg")
    assert client.get(GROUP, headers=admin).status_code == 200
    other.post("/admin/v2/tenants/t", json={"adminRoles": []})
    assert client.get(GROUP, headers=admin).status_code == 403
