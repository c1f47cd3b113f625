"""The reporter honours the server's request quota (KIP-124's throttle time)."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi.testclient import TestClient

from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.factories import FakeClock, create_group, create_namespace, create_tenant


def test_a_throttled_reporter_waits_before_its_next_call(
    client: TestClient, live_url: str, token: Callable[[str], str]
) -> None:
    create_group(client, "rg", publishRateInMsgs=100)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg", producers=["chatty"])
    limit = client.put("/admin/v2/request-quotas/roles/chatty", json={"requestsPerSecond": 1})
    assert limit.status_code == 204
    quota = NamespaceQuota("t", "ns")
    with Reporter(
        AdminClient(live_url, token=token("chatty")), [quota], wall_clock=FakeClock(time.time())
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
