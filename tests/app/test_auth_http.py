"""Authentication over HTTP: every admin route refuses missing and bad tokens with a 401."""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Iterator

import jwt
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.auth import create_token, generate_key_pair, generate_secret_key
from tests.conftest import SUPERUSER, make_settings
from tests.factories import running_app

PATH_VALUES = {"rg": "rg", "tenant": "t", "namespace": "ns", "role": "job"}


def admin_routes(app: FastAPI) -> Iterator[tuple[str, str]]:
    for template, operations in app.openapi()["paths"].items():
        if template.startswith("/admin/"):
            path = re.sub(r"{(\w+)}", lambda match: PATH_VALUES[match[1]], template)
            for method in operations:
                yield method.upper(), path


def test_every_admin_route_is_covered(app: FastAPI) -> None:
    assert len(list(admin_routes(app))) >= 25


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic YWRtaW46YWRtaW4=",
        "Bearer garbage",
        "Bearer a.b.c",
        "Bearer " + "x" * 5000,
    ],
)
def test_missing_or_garbage_token_is_401_everywhere(
    anonymous: TestClient, app: FastAPI, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in admin_routes(app):
        response = anonymous.request(method, path, headers=headers)
        assert response.status_code == 401, (method, path)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["reason"]


def test_token_signed_with_another_key_is_401(anonymous: TestClient, app: FastAPI) -> None:
    forged = create_token(subject=SUPERUSER, secret_key=generate_secret_key())
    for method, path in admin_routes(app):
        response = anonymous.request(method, path, headers={"Authorization": f"Bearer {forged}"})
        assert response.status_code == 401, (method, path)
        assert response.json() == {"reason": "Invalid token: Invalid signature"}


def test_expired_token_is_401(anonymous: TestClient, secret_key: bytes) -> None:
    expired = jwt.encode({"sub": SUPERUSER, "exp": 1_000_000_000}, secret_key, algorithm="HS256")
    response = anonymous.get(
        "/admin/v2/resourcegroups", headers={"Authorization": f"Bearer {expired}"}
    )
    assert response.status_code == 401
    assert response.json() == {"reason": "Invalid token: Token expired"}


def test_unexpired_token_with_exp_is_accepted(anonymous: TestClient, secret_key: bytes) -> None:
    token = create_token(
        subject=SUPERUSER, secret_key=secret_key, expires_in=datetime.timedelta(hours=1)
    )
    response = anonymous.get(
        "/admin/v2/resourcegroups", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200


def test_unsigned_token_is_401(anonymous: TestClient) -> None:
    unsigned = jwt.encode({"sub": SUPERUSER}, None, algorithm="none")
    response = anonymous.get(
        "/admin/v2/resourcegroups", headers={"Authorization": f"Bearer {unsigned}"}
    )
    assert response.status_code == 401


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_public_key_setting_accepts_key_pair_tokens(
    database_url: str, algorithm: str, engine: object
) -> None:
    pair = generate_key_pair(algorithm)
    settings = make_settings(database_url, b"unused" * 8).model_copy(
        update={
            "auth_token_secret_key": None,
            "auth_token_public_key": "data:;base64," + base64.b64encode(pair.public_key).decode(),
        }
    )
    with running_app(settings) as app:
        client = TestClient(app)
        good = create_token(subject=SUPERUSER, private_key=pair.private_key)
        other = generate_key_pair(algorithm)
        bad = create_token(subject=SUPERUSER, private_key=other.private_key)
        assert client.get("/admin/v2/resourcegroups", headers=bearer(good)).status_code == 200
        assert client.get("/admin/v2/resourcegroups", headers=bearer(bad)).status_code == 401


def test_auth_disabled_lets_everyone_in(database_url: str, engine: object) -> None:
    settings = make_settings(database_url, generate_secret_key(), auth_enabled=False)
    with running_app(settings) as app:
        client = TestClient(app)
        assert client.put("/admin/v2/resourcegroups/rg", json={}).status_code == 204
        assert client.get("/admin/v2/resourcegroups").json() == ["rg"]


def test_docs_and_health_need_no_token(anonymous: TestClient) -> None:
    assert anonymous.get("/openapi.json").status_code == 200
    assert anonymous.get("/docs").status_code == 200
    assert anonymous.get("/health").json() == {"status": "ok"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
