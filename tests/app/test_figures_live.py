"""What the server shows people is what went through: real rgspark workers send at known
rates to a live server, and the usage history, ``rgadmin top --once`` and ``/metrics`` (the
rate of its counters) are held against what the workers sent, counted here, on both
databases. When the workers stop, the group reads idle within a lease, its grace and a
sample."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from app.auth import create_token
from app.quota import history
from app.state import state_of
from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import create_group, create_namespace, create_tenant, running_app

RGADMIN = Path(sys.executable).with_name("rgadmin")
RESOLUTION_S = 1.0
# Short intervals and leases, so that a moment's usage is complete (`complete_after_s`)
# within a few seconds.
INTERVAL_S = 0.25
LEASE_S = 0.25
RATES = (120.0, 80.0, 100.0)  # msgs/s of each worker: together well under the quota
QUOTA = 1000
RUN_S = 12.0
TOLERANCE = 0.05


@dataclass
class Worker:
    """A worker process's worth of rgspark: a reporter, and a producer sending at ``rate``
    through its limits, 20 ms of work at a time; every charge is recorded (when, how many)."""

    url: str
    token: str
    rate: float
    sent: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.quota = NamespaceQuota("t", "ns")
        self.reporter = Reporter(AdminClient(self.url, token=self.token), [self.quota])
        self.reporter.start()
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        self.quota.use("publish")
        batch = self.rate / 50
        due = time.time()
        while not self._stop.is_set():
            self.quota.acquire("publish", batch, 0)
            self.sent.append((time.time(), batch))
            due += batch / self.rate
            self._stop.wait(max(0.0, due - time.time()))

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        self.reporter.close()


def sent_between(workers: list[Worker], start: float, end: float) -> float:
    return sum(units for worker in workers for at, units in worker.sent if start <= at < end)


@pytest.fixture
def live(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[tuple[str, FastAPI]]:
    settings = make_settings(
        database_url,
        secret_key,
        usage_history_resolution_seconds=RESOLUTION_S,
        report_interval_seconds=INTERVAL_S,
        report_lease_seconds=LEASE_S,
    )
    with running_app(settings) as app, serve(app) as url:
        with httpx.Client(base_url=url, headers=headers(secret_key, SUPERUSER)) as admin:
            create_group(admin, "rg", publishRateInMsgs=QUOTA)
            create_tenant(admin, "t")
            create_namespace(admin, "t/ns", group="rg", producers=["job"])
        yield url, app


def headers(secret_key: bytes, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(subject=role, secret_key=secret_key)}"}


def used_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rg_resource_group_used_total"
        and sample.labels == {"group": "rg", "dimension": "publishMsgs"}
    )


def top_usage(url: str, secret_key: bytes) -> float:
    """The usage ``rgadmin top --once`` shows for the group's publish msgs."""
    token = create_token(subject=SUPERUSER, secret_key=secret_key)
    printed = subprocess.run(
        [str(RGADMIN), "top", "--once", "rg"],
        env=os.environ | {"RG_ADMIN_URL": url, "RG_ADMIN_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    row = next(line.split() for line in printed.splitlines() if "publishMsgs" in line)
    return float(row[3])


def test_what_people_see_is_what_the_workers_sent(
    live: tuple[str, FastAPI], secret_key: bytes
) -> None:
    url, app = live
    token = create_token(subject="job", secret_key=secret_key)
    workers = [Worker(url, token, rate) for rate in RATES]
    for worker in workers:
        worker.start()
    try:
        time.sleep(2.0)  # every worker answered and sending
        counted, counted_at = used_total(url), time.time()
        time.sleep(RUN_S - 2.0)
        # The counters' rate over the window, as Prometheus' rate() reads it; the units are
        # counted as reports arrive, a report interval or a lease after they were sent.
        rate = (used_total(url) - counted) / (time.time() - counted_at)
        sent_rate = sent_between(workers, counted_at, time.time()) / (time.time() - counted_at)
        assert rate == pytest.approx(sent_rate, rel=TOLERANCE)
        shown = top_usage(url, secret_key)
    finally:
        for worker in workers:
            worker.stop()
    stopped = time.time()
    started = min(worker.sent[0][0] for worker in workers)
    assert shown == pytest.approx(sum(RATES), rel=TOLERANCE)

    # Every complete moment between the first whole one and the stop, against what the
    # workers sent in the resolution before it. Units a worker uses after its last report
    # are never reported (it releases its share and exits), so the last interval before the
    # stop is left out.
    time.sleep(history.complete_after_s(state_of(app).settings) + RESOLUTION_S)
    found = history_of(url, secret_key)
    checked = 0
    usage = found["dimensions"]["publishRateInMsgs"]["usage"]
    for moment, used in zip(found["times"], usage, strict=True):
        if moment - RESOLUTION_S < started + RESOLUTION_S or moment > stopped - INTERVAL_S:
            continue
        sent = sent_between(workers, moment - RESOLUTION_S, moment) / RESOLUTION_S
        assert used == pytest.approx(sent, rel=TOLERANCE), moment
        checked += 1
    assert checked >= RUN_S - 4

    # Idle within a lease, its grace and a sample of the stop (they released at once).
    idle_by = stopped + LEASE_S + 2 * INTERVAL_S + RESOLUTION_S
    complete_by = idle_by + 2 * RESOLUTION_S + history.complete_after_s(state_of(app).settings)
    time.sleep(max(0.0, complete_by - time.time()))
    found = history_of(url, secret_key)
    after = [i for i, moment in enumerate(found["times"]) if moment >= idle_by + RESOLUTION_S]
    assert after
    for index in after:
        assert found["reporters"][index] == 0
        assert found["dimensions"]["publishRateInMsgs"]["demand"][index] == 0
        assert found["dimensions"]["publishRateInMsgs"]["usage"][index] in (0, None)
    assert found["dimensions"]["publishRateInMsgs"]["usage"][after[0]] == 0


def history_of(url: str, secret_key: bytes) -> dict[str, Any]:
    response = httpx.get(
        f"{url}/admin/v2/resourcegroups/rg/usage",
        params={"since": 120},
        headers=headers(secret_key, SUPERUSER),
    )
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found
