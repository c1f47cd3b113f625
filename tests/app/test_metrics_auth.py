"""``/metrics`` behind a token on request, as Pulsar's authenticateMetricsEndpoint with its
metricsRoles: open by default; when asked, 401 without a valid token, 403 for a role that is
neither a superuser nor a metrics role."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.auth import create_token, generate_secret_key
from tests.conftest import SUPERUSER, make_settings
from tests.factories import running_app

Auth = Callable[[str], dict[str, str]]


@pytest.fixture
def metrics_client(database_url: str, secret_key: bytes) -> Iterator[Callable[..., TestClient]]:
    with ExitStack() as apps:

        def client(**settings: Any) -> TestClient:
            app = apps.enter_context(
                running_app(make_settings(database_url, secret_key, **settings))
            )
            return TestClient(app, raise_server_exceptions=False)

        yield client


def test_open_by_default(metrics_client: Callable[..., TestClient]) -> None:
    response = metrics_client().get("/metrics")
    assert response.status_code == 200
    assert "rg_" in response.text


def test_when_asked_a_token_of_a_superuser_or_metrics_role_is_needed(
    metrics_client: Callable[..., TestClient], auth: Auth
) -> None:
    client = metrics_client(authenticate_metrics_endpoint=True, metrics_roles="prometheus, ops")

    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Authentication required" in missing.json()["reason"]
    forged = create_token(subject=SUPERUSER, secret_key=generate_secret_key())
    assert client.get("/metrics", headers={"Authorization": f"Bearer {forged}"}).status_code == 401

    other = client.get("/metrics", headers=auth("tenant-admin"))
    assert other.status_code == 403
    assert "RG_METRICS_ROLES" in other.json()["reason"]

    for role in (SUPERUSER, "prometheus", "ops"):
        response = client.get("/metrics", headers=auth(role))
        assert response.status_code == 200, role
        assert response.headers["content-type"].startswith("text/plain")


def test_only_metrics_is_covered(metrics_client: Callable[..., TestClient], auth: Auth) -> None:
    client = metrics_client(authenticate_metrics_endpoint=True)
    assert client.get("/health").status_code == 200
    # A trailing slash is no way around it: it redirects to /metrics, which asks for a token.
    slash = client.get("/metrics/", follow_redirects=False)
    assert "rg_" not in slash.text
    assert client.get("/metrics/").status_code == 401
    assert client.get("/metrics", headers=auth(SUPERUSER)).status_code == 200


def test_with_authentication_off_it_stays_open(
    metrics_client: Callable[..., TestClient],
) -> None:
    # As in Pulsar, whose setting takes effect only with authenticationEnabled.
    client = metrics_client(authenticate_metrics_endpoint=True, auth_enabled=False)
    assert client.get("/metrics").status_code == 200
