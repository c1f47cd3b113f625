"""``/admin/v2/clusters``: the one cluster, named by ``RG_CLUSTER_NAME``, for Pulsar tools."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.config import Settings
from tests.conftest import make_settings
from tests.factories import running_app


def test_lists_the_configured_cluster_to_any_role(
    client: TestClient, database_url: str, secret_key: bytes, auth: Callable[[str], dict[str, str]]
) -> None:
    assert client.get("/admin/v2/clusters").json() == ["standalone"]
    with running_app(make_settings(database_url, secret_key, cluster_name="spark-east")) as app:
        response = TestClient(app).get("/admin/v2/clusters", headers=auth("a-job"))
        assert (response.status_code, response.json()) == (200, ["spark-east"])


def test_needs_a_token(anonymous: TestClient) -> None:
    assert anonymous.get("/admin/v2/clusters").status_code == 401


def test_a_name_pulsar_would_refuse_is_refused() -> None:
    with pytest.raises(ValidationError, match="cluster_name"):
        Settings(cluster_name="two words")
