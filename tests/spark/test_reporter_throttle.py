"""The reporter honours the server's request quota (KIP-124's throttle time)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from rgspark._admin import AdminClient
from rgspark._reporter import NamespaceQuota, Reporter
from tests.factories import FakeClock


def test_a_throttled_reporter_waits_before_its_next_call(
    client: TestClient, live_url: str, token: Callable[[str], str]
) -> None:
    for method, path, body in (
        ("PUT", "/admin/v2/resourcegroups/rg", {"publishRateInMsgs": 100}),
        ("PUT", "/admin/v2/tenants/t", {}),
        ("PUT", "/admin/v2/namespaces/t/ns", None),
        ("POST", "/admin/v2/namespaces/t/ns/resourcegroup/rg", None),
        ("POST", "/admin/v2/namespaces/t/ns/permissions/chatty", ["produce"]),
        ("PUT", "/admin/v2/request-quotas/roles/chatty", {"requestsPerSecond": 1}),
    ):
        assert client.request(method, path, json=body).status_code == 204
    quota = NamespaceQuota("t", "ns")
    with Reporter(
        AdminClient(live_url, token=token("chatty")), [quota], wall_clock=FakeClock()
    ) as reporter:
        answers = []
        for _ in range(3):
            wait = reporter.run_once()
            answers.append((wait, reporter.admin.throttle_s, reporter.interval_s))
    # Three calls in a row against one a second: the server delays the later answers and
    # says by how much, and the reporter waits at least that long before calling again.
    throttles = [throttle for _, throttle, _ in answers]
    assert throttles[0] == 0 and throttles[-1] > 0
    for wait, throttle, interval in answers:
        assert wait == max(interval, throttle)
    assert reporter.throttled_s == sum(throttles)
