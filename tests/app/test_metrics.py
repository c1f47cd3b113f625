"""``/metrics``: Prometheus' text format, with group figures that match the reports sent."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from app.state import state_of
from tests.conftest import make_settings
from tests.factories import create_group, create_namespace, create_tenant, running_app

PROJECT_ROOT = Path(__file__).resolve().parents[2]
Auth = Callable[[str], dict[str, str]]


def scrape(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(metrics: dict[Any, float], name: str, **labels: str) -> float:
    return metrics[name, frozenset(labels.items())]


@pytest.fixture
def server(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[FastAPI]:
    """A fresh app, so that its metrics hold only what this test did."""
    with running_app(make_settings(database_url, secret_key)) as app:
        yield app


def test_group_figures_match_the_reports(server: FastAPI, client: TestClient, auth: Auth) -> None:
    create_group(client, "rg", publishRateInMsgs=1000)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg", producers=["job"])
    jobs = TestClient(server, headers=auth("job"))
    allocations = {}
    for reporter, used, demand in (("a", 300, 400.0), ("b", 500, 900.0)):
        report = {
            "sentAtMs": int(state_of(server).clock() * 1000),
            "intervalMs": 1000,
            "namespaces": {"t/ns": {"publishMsgs": {"used": used, "demand": demand}}},
        }
        answer = jobs.post(f"/quota/v1/reporters/{reporter}/reports", json=report).json()
        allocations[reporter] = answer["namespaces"]["t/ns"]["allocations"]["publishMsgs"]

    metrics = scrape(jobs)
    group = {"group": "rg", "dimension": "publishMsgs"}
    assert value(metrics, "rg_resource_group_limit", **group) == 1000
    assert value(metrics, "rg_resource_group_usage", **group) == pytest.approx(800)
    assert value(metrics, "rg_resource_group_demand", **group) == pytest.approx(1300)
    assert value(metrics, "rg_resource_group_allocation", **group) == pytest.approx(
        sum(allocations.values())
    )
    assert value(metrics, "rg_resource_group_reporters", group="rg") == 2
    bytes_ = {"group": "rg", "dimension": "publishBytes"}
    assert value(metrics, "rg_resource_group_limit", **bytes_) == -1

    assert value(metrics, "rg_role_requests_total", role="job") == 2
    route = "/quota/v1/reporters/{reporterId}/reports"
    assert value(metrics, "rg_http_requests_total", method="POST", route=route, status="200") == 2
    assert value(metrics, "rg_http_request_duration_seconds_count", method="POST", route=route) == 2


def test_the_grafana_dashboard_queries_only_metrics_the_server_serves(server: FastAPI) -> None:
    dashboard = json.loads((PROJECT_ROOT / "grafana" / "resourcegroups.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\brg_\w+", target["expr"])
    }
    served = set()
    for line in TestClient(server).get("/metrics").text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            served.add(name)
            if kind == "histogram":
                served.update(f"{name}_{part}" for part in ("bucket", "count", "sum"))
    assert len(queried) >= 10
    assert queried <= served, queried - served


def test_metrics_need_no_token(anonymous: TestClient) -> None:
    assert anonymous.get("/metrics").status_code == 200


def test_database_errors_are_counted(secret_key: bytes) -> None:
    with running_app(make_settings("postgresql://postgres@127.0.0.1:1/none", secret_key)) as app:
        client = TestClient(app, raise_server_exceptions=False)
        assert client.get("/health").status_code == 503
        assert value(scrape(client), "rg_database_errors_total", kind="OperationalError") == 1
