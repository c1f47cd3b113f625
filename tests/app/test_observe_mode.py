"""A group's observe mode (``/admin/v2/resourcegroups/{rg}/mode``), on both databases: set and
read apart from the group's Pulsar object, pushed to workers as an admin change, carried by
every report's answer with the same allocations as enforcing, and shown by the usage history
and ``/metrics`` with what enforcing would hold back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.metrics import would_hold_back
from app.quota.history import hold_back
from tests.app.test_quota_reports import allocated, body, report
from tests.app.test_usage_history import complete_counts, read, sample
from tests.factories import FakeClock, create_group, create_namespace, create_tenant, reason

Auth = Callable[[str], dict[str, str]]

GROUPS = "/admin/v2/resourcegroups"
QUOTA = 1000
# The six fields of Pulsar's `ResourceGroup` (org.apache.pulsar.common.policies.data): what
# its Java admin client reads back; it fails on a property it does not know.
PULSAR_FIELDS = {
    "publishRateInMsgs",
    "publishRateInBytes",
    "dispatchRateInMsgs",
    "dispatchRateInBytes",
    "replicationDispatchRateInMsgs",
    "replicationDispatchRateInBytes",
}


@pytest.fixture
def world(client: TestClient) -> None:
    """Groups ``rg`` and ``twin`` (publish 1000 msgs/s each) on ``t/ns`` and ``t/twin``;
    tenant admin ``t-admin``; role ``job`` produces to both."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_group(client, "twin", publishRateInMsgs=QUOTA)
    create_tenant(client, "t", ["t-admin"])
    create_namespace(client, "t/ns", group="rg", producers=["job"])
    create_namespace(client, "t/twin", group="twin", producers=["job"])


def mode_of(client: TestClient, group: str = "rg") -> str:
    response = client.get(f"{GROUPS}/{group}/mode")
    assert response.status_code == 200, response.text
    found: str = response.json()["mode"]
    return found


def set_mode(client: TestClient, mode: str, group: str = "rg") -> None:
    response = client.put(f"{GROUPS}/{group}/mode", json={"mode": mode})
    assert response.status_code == 204, response.text


@pytest.mark.usefixtures("world")
class TestMode:
    def test_a_new_group_enforces_and_switches_both_ways(self, client: TestClient) -> None:
        assert mode_of(client) == "enforce"
        set_mode(client, "observe")
        assert (mode_of(client), mode_of(client, "twin")) == ("observe", "enforce")
        set_mode(client, "enforce")
        assert mode_of(client) == "enforce"

    def test_a_pulsar_put_of_the_group_keeps_the_mode(self, client: TestClient) -> None:
        set_mode(client, "observe")
        # As Pulsar's admin client sends it: every field, no mode.
        pulsar = dict.fromkeys(PULSAR_FIELDS, 5)
        assert client.put(f"{GROUPS}/rg", json=pulsar).status_code == 204
        assert client.put(f"{GROUPS}/rg", json={"dispatchRateInMsgs": 7}).status_code == 204
        assert mode_of(client) == "observe"

    def test_a_pulsar_get_shows_only_pulsars_fields(self, client: TestClient) -> None:
        set_mode(client, "observe")
        group = client.get(f"{GROUPS}/rg").json()
        assert set(group) == PULSAR_FIELDS
        assert all(type(value) is int for value in group.values())

    def test_the_groups_body_does_not_take_the_mode(
        self, client: TestClient, unchanged: Callable[[], Any]
    ) -> None:
        with unchanged():
            response = client.put(f"{GROUPS}/rg", json={"mode": "observe"})
            assert "mode" in reason(response, 400)

    @pytest.mark.parametrize(
        "payload",
        [{"mode": "watch"}, {"mode": None}, {}, {"mode": "observe", "extra": 1}, [], "observe"],
    )
    def test_bad_bodies_are_400_and_change_nothing(
        self, client: TestClient, unchanged: Callable[[], Any], payload: Any
    ) -> None:
        with unchanged():
            assert reason(client.put(f"{GROUPS}/rg/mode", json=payload), 400)

    def test_not_json_is_refused_and_changes_nothing(
        self, client: TestClient, unchanged: Callable[[], Any]
    ) -> None:
        with unchanged():
            response = client.put(
                f"{GROUPS}/rg/mode", content=b"observe", headers={"Content-Type": "text/plain"}
            )
            assert response.status_code in (400, 415)

    def test_a_missing_group_is_404_and_not_created(
        self, client: TestClient, unchanged: Callable[[], Any]
    ) -> None:
        with unchanged():
            response = client.put(f"{GROUPS}/nope/mode", json={"mode": "observe"})
            assert reason(response, 404) == "ResourceGroup does not exist"
        assert reason(client.get(f"{GROUPS}/nope/mode"), 404) == "ResourceGroup does not exist"

    def test_rights(self, client: TestClient, anonymous: TestClient, auth: Auth) -> None:
        assert anonymous.get(f"{GROUPS}/rg/mode").status_code == 401
        assert anonymous.put(f"{GROUPS}/rg/mode", json={"mode": "observe"}).status_code == 401
        # A tenant admin reads the mode of a group its tenant uses, but never sets it.
        admin = auth("t-admin")
        assert client.get(f"{GROUPS}/rg/mode", headers=admin).json() == {"mode": "enforce"}
        response = client.put(f"{GROUPS}/rg/mode", json={"mode": "observe"}, headers=admin)
        assert response.status_code == 403
        assert client.get(f"{GROUPS}/rg/mode", headers=auth("job")).status_code == 403
        assert mode_of(client) == "enforce"

    def test_a_switch_wakes_the_workers_watching(self, client: TestClient, auth: Auth) -> None:
        job = auth("job")
        generation = client.get("/quota/v1/changes", headers=job).json()["generation"]
        set_mode(client, "observe")
        # Answered at once (not after the wait asked for): the workers report now.
        response = client.get(
            "/quota/v1/changes", params={"after": generation, "waitMs": 30_000}, headers=job
        )
        assert response.json()["generation"] > generation

    def test_the_policy_says_the_mode(self, client: TestClient, auth: Auth) -> None:
        policy = "/quota/v1/namespaces/t/ns/policy"
        assert client.get(policy, headers=auth("job")).json()["mode"] == "enforce"
        set_mode(client, "observe")
        assert client.get(policy, headers=auth("job")).json()["mode"] == "observe"


@pytest.mark.usefixtures("world")
class TestAnswers:
    def test_observe_is_planned_exactly_as_enforce(
        self, client: TestClient, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        """Two groups alike, one observing: the same reports get the same allocations, and
        only the mode in the answer differs."""
        set_mode(client, "observe", "twin")
        job = auth("job")
        for demand in (800, 800, 3000, 300, 1200):
            clock.advance(1)
            answers = {}
            for ns in ("t/ns", "t/twin"):
                for worker in ("a", "b"):
                    answer = report(
                        servers[0], job, f"{worker}-{ns[2:]}", body(clock, demand, ns=ns)
                    )
                    answers[ns, worker] = answer["namespaces"][ns]
            for worker in ("a", "b"):
                enforcing, observing = answers["t/ns", worker], answers["t/twin", worker]
                assert (enforcing["mode"], observing["mode"]) == ("enforce", "observe")
                assert enforcing["allocations"] == observing["allocations"]
                assert enforcing["fallbackAllocations"] == observing["fallbackAllocations"]

    def test_a_switch_reaches_the_next_answer(
        self, client: TestClient, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        first = report(servers[0], job, "a", body(clock, 800))
        assert first["namespaces"]["t/ns"]["mode"] == "enforce"
        set_mode(client, "observe")
        clock.advance(1)
        # The other process too: it remembers the namespace's group under the old generation.
        for app in servers:
            answer = report(app, job, "a", body(clock, 800))
            assert answer["namespaces"]["t/ns"]["mode"] == "observe"
            assert allocated(answer) == pytest.approx(allocated(first), rel=0.05)

    def test_a_namespace_without_a_group_enforces_nothing(
        self, client: TestClient, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        create_namespace(client, "t/free", producers=["job"])
        answer = report(servers[0], auth("job"), "a", body(clock, 800, ns="t/free"))
        assert answer["namespaces"]["t/free"]["mode"] == "enforce"
        assert allocated(answer, "t/free") == -1


class TestHoldBack:
    @pytest.mark.parametrize(
        ("usage", "allocation", "expected"),
        [
            (3000.0, 1000.0, 2 / 3),
            (1000.0, 1000.0, 0.0),
            (500.0, 1000.0, 0.0),
            (0.0, 1000.0, None),
            (None, 1000.0, None),
            (3000.0, None, None),
        ],
    )
    def test_the_share_of_the_usage_the_allocation_does_not_cover(
        self, usage: float | None, allocation: float | None, expected: float | None
    ) -> None:
        assert hold_back(usage, allocation) == (
            None if expected is None else pytest.approx(expected)
        )

    def test_metrics_from_demand_and_allocation(self) -> None:
        assert would_hold_back(4000.0, 1000.0) == pytest.approx(0.75)
        assert would_hold_back(500.0, 1000.0) == 0.0
        assert would_hold_back(0.0, 1000.0) is None
        assert would_hold_back(4000.0, -1.0) is None  # unlimited

    @pytest.mark.usefixtures("world")
    def test_the_history_shows_the_mode_and_what_enforcing_would_hold_back(
        self, client: TestClient, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        set_mode(client, "observe")
        start = clock.now - clock.now % 10
        # One worker sending 3000 msgs/s, unheld, against its allocation of the 1000.
        for second in range(1, 11):
            clock.now = start + second
            report(servers[0], auth("job"), "a", body(clock, 3000))
        assert sample(servers[0], clock.now)
        complete_counts(servers, clock, clock.now)
        found = read(servers[1], auth)
        assert found["mode"] == "observe"
        msgs = found["dimensions"]["publishRateInMsgs"]
        assert msgs["usage"] == [pytest.approx(3000)]
        assert msgs["allocation"][0] == pytest.approx(QUOTA, rel=0.05)
        assert msgs["holdBack"] == [pytest.approx(2 / 3, abs=0.02)]
        assert found["dimensions"]["publishRateInBytes"]["holdBack"] == [None]  # unlimited
        set_mode(client, "enforce")
        assert read(servers[1], auth)["mode"] == "enforce"

    @pytest.mark.usefixtures("world")
    def test_metrics_show_the_mode_and_the_would_hold_back_ratio(
        self, client: TestClient, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        set_mode(client, "observe")
        for _ in range(3):
            clock.advance(1)
            report(servers[0], auth("job"), "a", body(clock, 4000))
            report(servers[0], auth("job"), "b", body(clock, 100, ns="t/twin"))
        text = TestClient(servers[0]).get("/metrics").text
        assert 'rg_resource_group_observe{group="rg"} 1\n' in text
        assert 'rg_resource_group_observe{group="twin"} 0\n' in text
        line = next(
            line
            for line in text.splitlines()
            if line.startswith('rg_resource_group_would_hold_back_ratio{group="rg",')
            and 'dimension="publishMsgs"' in line
        )
        assert float(line.split()[-1]) == pytest.approx(0.75, abs=0.02)
        assert 'would_hold_back_ratio{group="twin"' not in text  # it enforces
