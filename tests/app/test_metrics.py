"""``/metrics``: Prometheus' text format, with group figures that match the reports sent."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from app.metrics import GroupStats, GroupTotals
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
    # Counted, not sampled: every unit the reports said was used, exactly.
    assert value(metrics, "rg_resource_group_used_total", **group) == 800
    assert value(metrics, "rg_resource_group_demand", **group) == pytest.approx(1300)
    assert value(metrics, "rg_resource_group_allocation", **group) == pytest.approx(
        sum(allocations.values())
    )
    assert value(metrics, "rg_resource_group_reporters", group="rg") == 2
    bytes_ = {"group": "rg", "dimension": "publishBytes"}
    assert value(metrics, "rg_resource_group_limit", **bytes_) == -1
    assert value(metrics, "rg_resource_group_used_total", **bytes_) == 0

    assert value(metrics, "rg_role_requests_total", role="job") == 2
    route = "/quota/v1/reporters/{reporterId}/reports"
    assert value(metrics, "rg_http_requests_total", method="POST", route=route, status="200") == 2
    assert value(metrics, "rg_http_request_duration_seconds_count", method="POST", route=route) == 2


def test_used_units_are_counters_that_only_go_up(
    server: FastAPI, client: TestClient, auth: Auth
) -> None:
    """Reports of any interval, a few milliseconds or a lease, add exactly their units: the
    counter's rate over a window is what went through in it, whatever the reports' rates."""
    create_group(client, "rg", publishRateInMsgs=1000)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg", producers=["job"])
    jobs = TestClient(server, headers=auth("job"))
    sent, seen = 0, []
    for interval_ms, used in ((5, 20), (1000, 180), (3, 20), (8000, 1600)):
        report = {
            "sentAtMs": int(state_of(server).clock() * 1000),
            "intervalMs": interval_ms,
            "namespaces": {"t/ns": {"publishMsgs": {"used": used, "demand": 200.0}}},
        }
        assert jobs.post("/quota/v1/reporters/w/reports", json=report).status_code == 200
        sent += used
        group = {"group": "rg", "dimension": "publishMsgs"}
        seen.append(value(scrape(jobs), "rg_resource_group_used_total", **group))
        assert seen[-1] == sent
    assert seen == sorted(seen)


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


GROUPS: dict[str, tuple[int, tuple[GroupTotals, ...]]] = {
    "rg": (
        2,
        (("publishMsgs", 1000.0, 1300.0, 999.5), ("publishBytes", -1.0, 0.0, -1.0)),
    ),
    'odd "name" \\ with\na newline': (
        1,
        (("dispatchMsgs", 1e21, math.inf, 12345678.9),),
    ),
    "idle": (0, ()),
}


class _Families(Collector):
    """The same figures as prometheus_client's own gauge families write them."""

    def collect(self) -> Iterator[Metric]:
        figures = ("limit", "demand", "allocation")
        families = [
            GaugeMetricFamily(f"rg_resource_group_{name}", "", labels=["group", "dimension"])
            for name in figures
        ]
        reporters = GaugeMetricFamily("rg_resource_group_reporters", "", labels=["group"])
        for group, (count, totals) in GROUPS.items():
            reporters.add_metric([group], count)
            for dimension, *values in totals:
                for family, figure in zip(families, values, strict=True):
                    family.add_metric([group, dimension], figure)
        yield from families
        yield reporters


def _parsed(text: bytes) -> dict[str, tuple[str, list[Any]]]:
    return {
        family.name: (family.type, family.samples)
        for family in text_string_to_metric_families(text.decode())
    }


def test_group_figures_read_back_as_prometheus_client_writes_them() -> None:
    stats = GroupStats(clock=lambda: 0.0, stale_after_s=60.0)
    for group, (count, totals) in GROUPS.items():
        stats.record(group, count, totals)
    oracle = CollectorRegistry()
    oracle.register(_Families())

    ours, theirs = _parsed(stats.exposition()), _parsed(generate_latest(oracle))

    assert ours == theirs
    assert len(theirs["rg_resource_group_limit"][1]) == 3


def test_a_scrape_holds_up_no_other_request(server: FastAPI) -> None:
    """Writing a fleet's metrics takes a second; requests are served meanwhile."""
    writing, written = threading.Event(), threading.Event()

    class SlowStats(GroupStats):
        def exposition(self) -> bytes:
            writing.set()
            assert written.wait(timeout=30)
            return super().exposition()

    metrics = state_of(server).metrics
    metrics.groups = SlowStats(lambda: 0.0, 60.0)
    with TestClient(server) as client:  # one event loop for every request
        scraped: list[int] = []
        scrape = threading.Thread(target=lambda: scraped.append(client.get("/metrics").status_code))
        scrape.start()
        try:
            assert writing.wait(timeout=30)
            assert client.get("/health").status_code == 200  # while the text is being written
            assert scrape.is_alive()
        finally:
            written.set()
            scrape.join(timeout=30)
    assert scraped == [200]
