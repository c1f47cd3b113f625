"""``/quota/v1``: usage reports answered with allocations, through HTTP on both databases."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.models import QuotaGroup, QuotaReporter, QuotaUsage
from app.quota import reporters, store
from app.quota.schemas import MAX_CLOCK_AHEAD_S
from app.quota.tuning import EARLY_REPORT, FEW_MARKERS
from tests.check import assert_store_consistent
from tests.conftest import SUPERUSER
from tests.factories import FakeClock, create_group, create_namespace, create_tenant, reason

Auth = Callable[[str], dict[str, str]]
QUOTA = 1000
INTERVAL_S = 1.0
LEASE_MS = round(Settings().report_lease_seconds * 1000)  # the default, which the apps use


@pytest.fixture
def world(client: TestClient) -> None:
    """Group ``rg`` (publish 1000 msgs/s) on ``t/ns``; role ``job`` produces to it."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_tenant(client, "t", ["tenant-admin"])
    create_namespace(client, "t/ns", group="rg", producers=["job"])
    create_namespace(client, "t/other")


def body(clock: FakeClock, demand: float, *, used: int | None = None, ns: str = "t/ns") -> Any:
    used = round(demand * INTERVAL_S) if used is None else used
    return {
        "sentAtMs": clock.ms(),
        "intervalMs": round(INTERVAL_S * 1000),
        "namespaces": {ns: {"publishMsgs": {"used": used, "demand": demand}}},
    }


def report(app: FastAPI, headers: dict[str, str], reporter: str, payload: Any) -> dict[str, Any]:
    response = TestClient(app).post(
        f"/quota/v1/reporters/{reporter}/reports", json=payload, headers=headers
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def allocated(result: dict[str, Any], ns: str = "t/ns") -> float:
    rate: float = result["namespaces"][ns]["allocations"]["publishMsgs"]
    return rate


def both_want_800(
    servers: list[FastAPI], headers: dict[str, str], clock: FakeClock, rounds: int
) -> dict[str, float]:
    """Reporters a (on server 0) and b (on server 1) each want 800, for ``rounds``
    intervals: their last allocations."""
    rates: dict[str, float] = {}
    for _ in range(rounds):
        clock.now += INTERVAL_S
        rates["a"] = allocated(report(servers[0], headers, "a", body(clock, 800)))
        rates["b"] = allocated(report(servers[1], headers, "b", body(clock, 800)))
    return rates


def stored_rows(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(QuotaUsage)) or 0)


@pytest.mark.usefixtures("world")
class TestReports:
    def test_answer_carries_group_limits_and_cadence(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        result = report(servers[0], auth("job"), "r1", body(clock, 300))
        assert result["accepted"] is True
        # A newcomer reports again soon: an eighth of an interval on, its lease one.
        assert result["reportIntervalMs"] == EARLY_REPORT * INTERVAL_S * 1000
        assert result["leaseMs"] == INTERVAL_S * 1000
        for _ in range(3):
            clock.now += INTERVAL_S
            result = report(servers[0], auth("job"), "r1", body(clock, 300))
        # Steady: its answer holds for a lease, and it reports again only then.
        assert result["reportPeriodMs"] == 1000
        assert result["leaseMs"] == result["reportIntervalMs"] == LEASE_MS
        namespace = result["namespaces"]["t/ns"]
        assert namespace["resourceGroup"] == "rg"
        assert namespace["limits"]["publishRateInMsgs"] == QUOTA
        assert namespace["allocations"]["publishBytes"] == -1
        assert 0 < namespace["allocations"]["publishMsgs"] <= QUOTA

    def test_reporters_on_two_servers_share_the_quota(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, database_url: str
    ) -> None:
        rates = both_want_800(servers, auth("job"), clock, rounds=6)
        assert rates["a"] == pytest.approx(QUOTA / 2, rel=0.05)
        assert rates["b"] == pytest.approx(QUOTA / 2, rel=0.05)
        assert sum(rates.values()) <= QUOTA * 1.05
        assert_store_consistent(database_url, now=clock.now)

    def test_a_stale_report_is_not_stored(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        stale = body(clock, 800)
        stale["sentAtMs"] -= round(2.5 * INTERVAL_S * 1000)
        result = report(servers[0], auth("job"), "late", stale)
        assert result["accepted"] is False
        assert allocated(result) > 0
        assert stored_rows(engine) == 0

    def test_a_report_from_the_future_is_refused_and_says_why(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        ahead = body(clock, 800)
        ahead["sentAtMs"] += round((MAX_CLOCK_AHEAD_S + 1) * 1000)
        response = TestClient(servers[0]).post(
            "/quota/v1/reporters/r/reports", json=ahead, headers=auth("job")
        )
        assert reason(response, 400) == (
            "sentAtMs is 61 s after the server's clock, more than 60 s: set the reporter's "
            "clock right (NTP)"
        )
        assert stored_rows(engine) == 0
        # Within the skew, it is a report like any other.
        ahead["sentAtMs"] -= 2000
        assert report(servers[0], auth("job"), "r", ahead)["accepted"] is True

    def test_a_silent_reporters_share_returns_to_the_others(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, database_url: str
    ) -> None:
        job = auth("job")
        for _ in range(4):
            clock.now += INTERVAL_S
            report(servers[0], job, "quiet", body(clock, 800))
            report(servers[1], job, "busy", body(clock, 800))
        rate = 0.0
        # "quiet" stops reporting: gone once its lease and two intervals have passed.
        for _ in range(round(LEASE_MS / 1000 / INTERVAL_S) + 6):
            clock.now += INTERVAL_S
            rate = allocated(report(servers[1], job, "busy", body(clock, 800)))
        assert rate == pytest.approx(QUOTA, rel=0.05)
        assert_store_consistent(database_url, now=clock.now)

    def test_a_released_share_is_free_at_once(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, database_url: str
    ) -> None:
        job = auth("job")
        for _ in range(4):
            clock.now += INTERVAL_S
            report(servers[0], job, "leaving", body(clock, 800))
            report(servers[0], job, "staying", body(clock, 800))
        client = TestClient(servers[1])
        assert client.delete("/quota/v1/reporters/leaving", headers=job).status_code == 204
        rate = allocated(report(servers[1], job, "staying", body(clock, 800)))
        assert rate == pytest.approx(QUOTA, rel=0.05)
        assert_store_consistent(database_url, now=clock.now)

    def test_a_change_of_quota_reaches_the_next_report(
        self,
        servers: list[FastAPI],
        client: TestClient,
        auth: Auth,
        clock: FakeClock,
        database_url: str,
    ) -> None:
        report(servers[0], auth("job"), "r", body(clock, 5000))
        client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 200})
        clock.now += INTERVAL_S
        result = report(servers[1], auth("job"), "r", body(clock, 5000))
        assert result["namespaces"]["t/ns"]["limits"]["publishRateInMsgs"] == 200
        assert allocated(result) <= 200
        assert_store_consistent(database_url, now=clock.now)

    def test_unlimited_namespace_gets_minus_one(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        result = report(servers[0], auth(SUPERUSER), "r", body(clock, 10, ns="t/other"))
        assert result["namespaces"]["t/other"]["resourceGroup"] is None
        assert result["namespaces"]["t/other"]["limits"] is None
        assert set(result["namespaces"]["t/other"]["allocations"].values()) == {-1}

    def test_silent_reporters_and_their_rows_are_deleted(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        report(servers[0], auth("job"), "old", body(clock, 100))
        clock.now += 20 * INTERVAL_S
        report(servers[0], auth("job"), "new", body(clock, 100))
        with engine.connect() as connection:
            reporters = set(connection.scalars(select(QuotaReporter.reporter_id)))
        assert reporters == {"new"}
        assert stored_rows(engine) == 1

    def test_a_failed_look_for_silent_reporters_leaves_the_report_answered(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        # The database going away between the report's transaction and the look: a failure
        # that cannot be caused for real at that instant.
        def unavailable(*_: Any) -> None:
            raise OperationalError("SELECT", {}, ConnectionError("server closed the connection"))

        monkeypatch.setattr(reporters, "any_silent", unavailable)
        monkeypatch.setattr(reporters, "expire", unavailable)
        result = report(servers[0], auth("job"), "r", body(clock, 100))
        assert result["accepted"] is True
        assert stored_rows(engine) == 1
        # Said once for the server, as every outage is (`app.transactions.DATABASE_OUTAGE`).
        assert "database unavailable: ConnectionError" in caplog.text


def stored_demand(engine: Engine, reporter: str) -> float:
    with engine.connect() as connection:
        demand = connection.scalar(
            select(QuotaUsage.publish_msgs_demand).where(QuotaUsage.reporter_id == reporter)
        )
    assert demand is not None
    return float(demand)


@pytest.mark.usefixtures("world")
class TestWhatServersRemember:
    """A server process answers steady reports from memory: never once the database moved on,
    whichever process or admin call moved it."""

    def test_small_moves_are_held_and_large_ones_recorded(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        job = auth("job")
        for demand, stored in ((300, 300), (310, 300), (290, 300), (330, 330)):
            clock.now += INTERVAL_S
            report(servers[0], job, "r", body(clock, demand))
            assert stored_demand(engine, "r") == stored

    def test_a_dimension_left_out_is_recorded_as_zero(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        job = auth("job")
        for _ in range(2):  # the second is answered from memory
            clock.now += INTERVAL_S
            report(servers[0], job, "r", body(clock, 300))
        assert stored_demand(engine, "r") == 300
        clock.now += INTERVAL_S
        stopped = {**body(clock, 0), "namespaces": {"t/ns": {}}}  # no longer publishes
        report(servers[0], job, "r", stopped)
        assert stored_demand(engine, "r") == 0

    def test_a_reporter_moving_between_servers_sees_its_own_writes(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        database_url: str,
    ) -> None:
        job = auth("job")
        for server in servers:  # both servers remember "a" wanting 800
            clock.now += INTERVAL_S
            report(server, job, "a", body(clock, 800))
        clock.now += INTERVAL_S
        report(servers[1], job, "a", body(clock, 100))
        # Back on server 0, 800 again: what server 0 remembers, but not what is stored.
        clock.now += INTERVAL_S
        report(servers[0], job, "a", body(clock, 800))
        assert stored_demand(engine, "a") == 800
        rates = {}
        for _ in range(4):
            clock.now += INTERVAL_S
            rates["b"] = allocated(report(servers[0], job, "b", body(clock, 800)))
            rates["a"] = allocated(report(servers[1], job, "a", body(clock, 100)))
        # Demands 100 and 800 leave 100 spare, shared in proportion as growth room.
        assert rates["a"] == pytest.approx(100 * (1 + 100 / 900), rel=0.02)
        assert rates["b"] == pytest.approx(800 * (1 + 100 / 900), rel=0.02)
        assert_store_consistent(database_url, now=clock.now)

    @pytest.mark.parametrize("reads_its_groups", [True, False], ids=["read", "looked-for"])
    def test_a_change_among_many_others_is_found(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        monkeypatch: pytest.MonkeyPatch,
        reads_its_groups: bool,
    ) -> None:
        # A reporter of many groups looks for those changed; when more groups changed than
        # it reads one by one, it compares all its rows. One of a few reads their markers.
        if not reads_its_groups:
            monkeypatch.setattr(store, "FEW_GROUPS", 0)
        job = auth("job")
        assert both_want_800(servers, job, clock, rounds=4)["a"] == pytest.approx(
            QUOTA / 2, rel=0.05
        )
        clock.now += INTERVAL_S
        report(servers[0], job, "a", body(clock, 800))  # its periodic full look
        report(servers[1], job, "b", body(clock, 100))  # changes rg's marker
        busy = datetime.fromtimestamp(clock.now - INTERVAL_S / 2, UTC)  # just before
        with engine.begin() as connection:
            connection.execute(
                insert(QuotaGroup),
                [
                    {"name": f"busy-{index}", "marker": index, "changed_at": busy}
                    for index in range(FEW_MARKERS + 1)
                ],
            )
        clock.now += INTERVAL_S
        # Server 0 learns that b wants less, and lets a grow.
        assert allocated(report(servers[0], job, "a", body(clock, 800))) > QUOTA / 2 * 1.1

    def test_a_change_committed_after_a_look_it_predates_is_found_at_the_next(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        # A report that waited in its lane commits a change made (dated) when it arrived:
        # a look at the changed markers made in between does not see it yet.
        job = auth("job")
        both_want_800(servers, job, clock, rounds=4)
        clock.now += INTERVAL_S
        looked_at = clock.now
        assert allocated(report(servers[0], job, "a", body(clock, 800))) == pytest.approx(500)
        clock.now = looked_at - 2 * INTERVAL_S  # b's report arrived then, and waited
        assert allocated(report(servers[1], job, "b", body(clock, 100))) < QUOTA / 4
        clock.now = looked_at + INTERVAL_S
        assert allocated(report(servers[0], job, "a", body(clock, 800))) > QUOTA / 2 * 1.1

    def test_a_namespace_moved_to_another_group_frees_its_share(
        self,
        servers: list[FastAPI],
        client: TestClient,
        auth: Auth,
        clock: FakeClock,
        database_url: str,
    ) -> None:
        create_namespace(client, "t/mover", group="rg")
        create_group(client, "other", publishRateInMsgs=50)
        admin = auth(SUPERUSER)
        for _ in range(4):
            clock.now += INTERVAL_S
            report(servers[0], admin, "stay", body(clock, 800))
            report(servers[0], admin, "move", body(clock, 800, ns="t/mover"))
        client.post("/admin/v2/namespaces/t/mover/resourcegroup/other")
        clock.now += INTERVAL_S
        moved = report(servers[1], admin, "move", body(clock, 800, ns="t/mover"))
        assert moved["namespaces"]["t/mover"]["resourceGroup"] == "other"
        assert allocated(moved, "t/mover") <= 50
        rate = 0.0
        for _ in range(3):
            clock.now += INTERVAL_S
            rate = allocated(report(servers[0], admin, "stay", body(clock, 800)))
        assert rate == pytest.approx(QUOTA, rel=0.05)
        assert_store_consistent(database_url, now=clock.now)

    def test_a_deleted_namespace_is_404_on_a_server_that_knew_it(
        self, servers: list[FastAPI], client: TestClient, auth: Auth, clock: FakeClock
    ) -> None:
        create_namespace(client, "t/brief")
        admin = auth(SUPERUSER)
        report(servers[0], admin, "r", body(clock, 10, ns="t/brief"))
        assert client.delete("/admin/v2/namespaces/t/brief").status_code == 204
        clock.now += INTERVAL_S
        response = TestClient(servers[0]).post(
            "/quota/v1/reporters/r/reports", json=body(clock, 10, ns="t/brief"), headers=admin
        )
        assert response.status_code == 404
        assert "t/brief" in response.json()["reason"]

    def test_a_changed_limit_reaches_a_reporter_answered_from_memory(
        self, servers: list[FastAPI], client: TestClient, auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        for _ in range(3):
            clock.now += INTERVAL_S
            report(servers[0], job, "r", body(clock, 100))
        # A rate that is not enforced: the plan stands, the limits in the answer change.
        client.put("/admin/v2/resourcegroups/rg", json={"replicationDispatchRateInMsgs": 7})
        clock.now += INTERVAL_S
        result = report(servers[0], job, "r", body(clock, 100))
        assert result["namespaces"]["t/ns"]["limits"]["replicationDispatchRateInMsgs"] == 7
        client.put("/admin/v2/resourcegroups/rg", json={"dispatchRateInBytes": 4096})
        clock.now += INTERVAL_S
        result = report(servers[0], job, "r", body(clock, 100))
        namespace = result["namespaces"]["t/ns"]
        assert namespace["limits"]["dispatchRateInBytes"] == 4096
        assert 0 < namespace["allocations"]["dispatchBytes"] <= 4096


@pytest.mark.usefixtures("world")
class TestRoles:
    def test_a_client_cannot_report_for_another_namespace(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, unchanged: Any
    ) -> None:
        with unchanged():
            response = TestClient(servers[0]).post(
                "/quota/v1/reporters/r/reports",
                json=body(clock, 10, ns="t/other"),
                headers=auth("job"),
            )
        assert response.status_code == 403
        assert "t/other" in response.json()["reason"]

    def test_a_revoked_permission_holds_from_the_next_report_on_any_process(
        self, servers: list[FastAPI], client: TestClient, auth: Auth, clock: FakeClock
    ) -> None:
        for app in servers:  # each process has checked, and remembers, the grant
            report(app, auth("job"), "r", body(clock, 10))
        revoked = client.delete("/admin/v2/namespaces/t/ns/permissions/job")
        assert revoked.status_code == 204
        for app in servers:
            clock.now += INTERVAL_S
            response = TestClient(app).post(
                "/quota/v1/reporters/r/reports", json=body(clock, 10), headers=auth("job")
            )
            assert response.status_code == 403

    @pytest.mark.parametrize("role", ["stranger", "consumer-only-elsewhere"])
    def test_roles_without_permission_are_403(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, role: str
    ) -> None:
        response = TestClient(servers[0]).post(
            "/quota/v1/reporters/r/reports", json=body(clock, 10), headers=auth(role)
        )
        assert response.status_code == 403

    def test_tenant_admins_may_report_and_read_policy(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        assert allocated(report(servers[0], auth("tenant-admin"), "r", body(clock, 10))) > 0
        policy = TestClient(servers[0]).get(
            "/quota/v1/namespaces/t/ns/policy", headers=auth("tenant-admin")
        )
        assert policy.json()["resourceGroup"] == "rg"

    def test_policy_for_clients_and_404_for_missing_namespace(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        client = TestClient(servers[0])
        policy = client.get("/quota/v1/namespaces/t/ns/policy", headers=auth("job"))
        assert policy.json()["limits"]["publishRateInMsgs"] == QUOTA
        assert (
            client.get("/quota/v1/namespaces/t/other/policy", headers=auth("job")).status_code
            == 403
        )
        # Rights before existence: a role without rights learns nothing of what exists.
        missing = "/quota/v1/namespaces/t/nope/policy"
        assert client.get(missing, headers=auth("job")).status_code == 403
        assert client.get(missing, headers=auth(SUPERUSER)).status_code == 404

    def test_a_reporter_id_belongs_to_its_role(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        report(servers[0], auth("job"), "mine", body(clock, 10))
        client = TestClient(servers[0])
        hijack = client.post(
            "/quota/v1/reporters/mine/reports", json=body(clock, 10), headers=auth("tenant-admin")
        )
        assert hijack.status_code == 403
        # Another role's reporter is released as one that does not exist: the answer does
        # not tell whether the id is in use.
        theirs = client.delete("/quota/v1/reporters/mine", headers=auth("tenant-admin"))
        missing = client.delete("/quota/v1/reporters/nope", headers=auth("tenant-admin"))
        assert reason(theirs, 404) == "Role tenant-admin has no reporter mine"
        assert reason(missing, 404) == "Role tenant-admin has no reporter nope"
        assert stored_rows(engine) == 1  # still there
        assert client.delete("/quota/v1/reporters/mine", headers=auth("job")).status_code == 204


@pytest.mark.usefixtures("world")
class TestMalformedReports:
    @pytest.mark.parametrize(
        ("payload", "reason"),
        [
            ({}, "sentAtMs"),
            ({"sentAtMs": 1, "intervalMs": 1000}, "namespaces"),
            ({"sentAtMs": 1, "intervalMs": 0, "namespaces": {}}, "intervalMs"),
            ({"sentAtMs": -1, "intervalMs": 1000, "namespaces": {}}, "sentAtMs"),
            ({"sentAtMs": 1, "intervalMs": 1000, "namespaces": {"t": {}}}, "namespaces"),
            ({"sentAtMs": 1, "intervalMs": 1000, "namespaces": {"t/n s": {}}}, "namespaces"),
            ({"sentAtMs": 1, "intervalMs": 1000, "namespaces": {}, "extra": 1}, "Unknown field"),
            ({"sentAtMs": 1.5, "intervalMs": 1000, "namespaces": {}}, "sentAtMs"),
            ("report", "Request body"),
        ],
    )
    def test_bad_envelope_is_400(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, payload: Any, reason: str
    ) -> None:
        with unchanged():
            response = TestClient(servers[0]).post(
                "/quota/v1/reporters/r/reports", json=payload, headers=auth("job")
            )
        assert response.status_code == 400, response.text
        assert reason in response.json()["reason"]

    @pytest.mark.parametrize(
        ("usage", "reason"),
        [
            ({"publishMsgs": {"used": -1, "demand": 1}}, "used"),
            ({"publishMsgs": {"used": 1, "demand": -5}}, "demand"),
            ({"publishMsgs": {"used": 1, "demand": 1e300}}, "demand"),
            ({"publishMsgs": {"used": 2**64, "demand": 1}}, "used"),
            ({"publishMsgs": {"used": 1.5, "demand": 1}}, "used"),
            ({"publishMsgs": {"used": 1, "demand": "fast"}}, "demand"),
            ({"publishMsgs": {"used": 1}}, "demand"),
            ({"publishMessages": {"used": 1, "demand": 1}}, "Unknown field"),
            ({"publishMsgs": {"used": 1, "demand": 1, "peak": 3}}, "Unknown field"),
        ],
    )
    def test_bad_figures_are_400_and_store_nothing(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        unchanged: Any,
        usage: Any,
        reason: str,
    ) -> None:
        payload = {"sentAtMs": clock.ms(), "intervalMs": 1000, "namespaces": {"t/ns": usage}}
        with unchanged():
            response = TestClient(servers[0]).post(
                "/quota/v1/reporters/r/reports", json=payload, headers=auth("job")
            )
        assert response.status_code == 400, response.text
        assert reason in response.json()["reason"]

    @pytest.mark.parametrize("raw", [b"", b"{", b"\xff"])
    def test_empty_or_broken_body_is_400(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, raw: bytes
    ) -> None:
        with unchanged():
            response = TestClient(servers[0]).post(
                "/quota/v1/reporters/r/reports",
                content=raw,
                headers={**auth("job"), "Content-Type": "application/json"},
            )
        assert response.status_code == 400

    @pytest.mark.parametrize("reporter", ["a b", "x" * 65, "é"])
    def test_bad_reporter_id_is_400(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, reporter: str
    ) -> None:
        response = TestClient(servers[0]).post(
            f"/quota/v1/reporters/{reporter}/reports", json=body(clock, 1), headers=auth("job")
        )
        assert response.status_code == 400
