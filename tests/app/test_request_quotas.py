"""Request-rate quotas per role (KIP-124): the admin API, the delays, the header."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.metrics import Metrics
from app.request_quotas import FORGET_AFTER_S, SAMPLE_S, SAMPLES, RequestQuotas, RequestThrottle
from tests.factories import FakeClock, attach, create_group, create_namespace, create_tenant

Auth = Callable[[str], dict[str, str]]
QUOTAS = "/admin/v2/request-quotas"
HEADER = "X-Throttle-Time-Ms"


def expected_delay(observed: float, quota: float, window: float) -> float:
    """KIP-124: X = min((O - T) / T * W, W)."""
    return max(0.0, min((observed - quota) / quota * window, window))


class TestThrottleMaths:
    """The sampled rate and the delay, on an injected clock."""

    def test_a_burst_of_100_at_10_per_second_is_delayed_by_the_formula(self) -> None:
        clock = FakeClock(1000.0)
        throttle = RequestThrottle(clock=clock)
        throttle.update(RequestQuotas(roles={"job": 10}))
        for n in range(1, 101):
            clock.now += 0.004  # 100 requests within 0.4 s
            delay, observed = throttle.record("job")
            window = SAMPLE_S  # the burst spans less than one sample
            assert observed == pytest.approx(n / window)
            assert delay == pytest.approx(expected_delay(n / window, 10, window))
        assert delay == SAMPLE_S  # capped at the window

    def test_rate_is_counted_over_the_samples_it_spans(self) -> None:
        clock = FakeClock(0.0)
        throttle = RequestThrottle(clock=clock)
        throttle.update(RequestQuotas(default=5))
        for _ in range(40):  # 8 requests a second for 5 s
            clock.now += 0.125
            delay, observed = throttle.record("job")
        assert observed == pytest.approx(40 / 5, rel=0.05)
        assert delay == pytest.approx(expected_delay(observed, 5, 5.0), rel=0.05)
        clock.now += 20  # eleven samples later the old ones are gone: one request in 10-11 s
        delay, observed = throttle.record("job")
        assert delay == 0.0
        assert 1 / 11 <= observed <= 1 / 10

    def test_roles_are_measured_apart_and_overrides_win(self) -> None:
        throttle = RequestThrottle(clock=lambda: 0.0)
        throttle.update(RequestQuotas(default=1, roles={"vip": 1000}))
        for _ in range(50):
            noisy, _ = throttle.record("noisy")
            vip, _ = throttle.record("vip")
        assert noisy > 0
        assert vip == 0
        assert throttle.record("quiet")[0] == 0

    def test_a_quiet_roles_rate_decays_to_0_in_the_metrics_then_is_forgotten(self) -> None:
        clock = FakeClock(0.0)
        throttle = RequestThrottle(clock=clock)
        metrics = Metrics(stale_after_s=3.0)
        metrics.watch_request_rates(throttle.rates)

        def shown() -> float | None:
            return metrics.registry.get_sample_value("rg_role_request_rate", {"role": "job"})

        for _ in range(40):  # 8 requests a second for 5 s, then silence
            clock.now += 0.125
            throttle.record("job")
        assert shown() == pytest.approx(8, rel=0.05)
        clock.now += 5
        decaying = shown()
        assert decaying is not None and 0 < decaying < 8
        clock.now += SAMPLES * SAMPLE_S
        assert shown() == 0
        clock.now += FORGET_AFTER_S
        assert shown() is None


class TestAdminApi:
    def test_set_read_and_remove(self, client: TestClient) -> None:
        assert client.get(QUOTAS).json() == {"default": None, "roles": {}}
        assert client.put(f"{QUOTAS}/default", json={"requestsPerSecond": 100}).status_code == 204
        # Roles live in tokens: a quota may name a role no token has used.
        assert client.put(f"{QUOTAS}/roles/svc@x", json={"requestsPerSecond": 5}).status_code == 204
        assert client.get(QUOTAS).json() == {"default": 100, "roles": {"svc@x": 5}}
        assert client.delete(f"{QUOTAS}/roles/svc@x").status_code == 204
        assert client.delete(f"{QUOTAS}/roles/svc@x").status_code == 404
        assert client.delete(f"{QUOTAS}/default").status_code == 204
        assert client.delete(f"{QUOTAS}/default").status_code == 404

    @pytest.mark.parametrize(
        "body",
        [
            {"requestsPerSecond": 0},
            {"requestsPerSecond": -5},
            {"requestsPerSecond": 2.5},
            {"requestsPerSecond": "10"},
            {"requestsPerSecond": 10**12},
            {"requestsPerSecond": True},
            {"requestsPerSecond": 10, "burst": 3},
            {},
            [],
        ],
    )
    def test_bad_quotas_are_400_and_change_nothing(
        self, client: TestClient, unchanged: Any, body: Any
    ) -> None:
        with unchanged():
            for path in (f"{QUOTAS}/default", f"{QUOTAS}/roles/job"):
                response = client.put(path, json=body)
                assert response.status_code == 400, response.text
                assert response.json()["reason"]

    @pytest.mark.parametrize("role", ["tenant-admin", "job"])
    def test_only_superusers(self, client: TestClient, auth: Auth, role: str) -> None:
        headers = auth(role)
        assert client.get(QUOTAS, headers=headers).status_code == 403
        put = client.put(f"{QUOTAS}/roles/{role}", json={"requestsPerSecond": 1}, headers=headers)
        assert put.status_code == 403


async def burst(url: str, headers: dict[str, str], count: int) -> list[tuple[float, float]]:
    """`count` requests at once; each answer's (throttle header seconds, seconds taken)."""
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:

        async def one() -> tuple[float, float]:
            started = time.monotonic()
            response = await http.get("/admin/v2/resourcegroups/rg")
            return int(response.headers[HEADER]) / 1000, time.monotonic() - started

        return list(await asyncio.gather(*(one() for _ in range(count))))


class TestEnforcement:
    @pytest.fixture(autouse=True)
    def world(self, client: TestClient) -> None:
        # Rates are measured per server process over 11 s and the app outlives a test, so
        # every test uses roles that no earlier request was counted for.
        self.job, self.other = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("job", "other"))
        create_group(client, "rg")
        create_tenant(client, "t", [self.job, self.other])
        create_namespace(client, "t/ns")
        attach(client, "t", "rg")

    def test_a_role_over_quota_is_delayed_and_others_are_not(
        self, client: TestClient, live_url: str, auth: Auth
    ) -> None:
        client.put(f"{QUOTAS}/roles/{self.job}", json={"requestsPerSecond": 10})
        answers = asyncio.run(burst(live_url, auth(self.job), 60))
        delays = sorted(delay for delay, _ in answers)
        # Within one sample, the n-th request is delayed min((n - 10) / 10, 1) s.
        assert delays[:9] == [0.0] * 9
        assert delays[-1] == pytest.approx(1.0, abs=0.05)
        assert sum(delay > 0 for delay in delays) >= 45
        for delay, took in answers:
            assert took >= delay - 0.05  # the delay was really applied
        others = asyncio.run(burst(live_url, auth(self.other), 60))
        assert {delay for delay, _ in others} == {0.0}
        admins = asyncio.run(burst(live_url, auth("admin"), 60))
        assert {delay for delay, _ in admins} == {0.0}

    def test_superusers_are_exempt_even_from_a_default(
        self, client: TestClient, live_url: str, auth: Auth
    ) -> None:
        client.put(f"{QUOTAS}/default", json={"requestsPerSecond": 1})
        answers = asyncio.run(burst(live_url, auth("admin"), 30))
        assert {delay for delay, _ in answers} == {0.0}

    def test_changes_apply_without_restart_and_removal_lifts_it(
        self, client: TestClient, auth: Auth
    ) -> None:
        job = auth(self.job)

        def delays(count: int) -> list[float]:
            return [
                int(client.get("/admin/v2/resourcegroups/rg", headers=job).headers[HEADER])
                for _ in range(count)
            ]

        assert set(delays(4)) == {0}
        client.put(f"{QUOTAS}/roles/{self.job}", json={"requestsPerSecond": 1})
        assert delays(1) == [1000]  # 5 requests in under a second: capped at the 1 s window
        client.delete(f"{QUOTAS}/roles/{self.job}")
        assert set(delays(4)) == {0}

    def test_every_response_of_the_role_carries_the_header(
        self, client: TestClient, auth: Auth
    ) -> None:
        job = auth(self.job)
        for path in ("/admin/v2/resourcegroups/rg", "/admin/v2/tenants", "/admin/v2/tenants/nope"):
            response = client.get(path, headers=job)
            assert HEADER in response.headers, (path, response.status_code)
