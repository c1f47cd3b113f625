"""A group's usage history (``GET /admin/v2/resourcegroups/{rg}/usage``), on both databases:
sampled from real reports once per moment by whichever server process gets there first,
served the same by every process, pruned past the retention, readable by the admins of
tenants that use the group."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.models import QuotaReporter, UsageSample
from app.quota import history
from app.quota.repository import UsageRepository
from app.state import state_of
from tests.app.test_quota_reports import INTERVAL_S, body, report
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import (
    FakeClock,
    attach,
    create_group,
    create_namespace,
    create_tenant,
    reason,
    running_app,
    set_default_group,
)

Auth = Callable[[str], dict[str, str]]

QUOTA = 1000
RETENTION_S = 60
RESOLUTION_S = 10
REPORT_INTERVAL_S = 10


@pytest.fixture
def servers(
    database_url: str, secret_key: bytes, engine: Engine, clock: FakeClock
) -> Iterator[list[FastAPI]]:
    """Two server processes' worth of apps, keeping a minute of history; reporters report
    every 10 s (so they stay alive between the samples of these tests)."""
    settings = make_settings(
        database_url,
        secret_key,
        usage_history_retention_seconds=RETENTION_S,
        report_interval_seconds=REPORT_INTERVAL_S,
    )
    with ExitStack() as stack:
        yield [stack.enter_context(running_app(settings, clock=clock)) for _ in range(2)]


@pytest.fixture
def world(client: TestClient) -> None:
    """Group ``rg`` (publish 1000 msgs/s) covers ``t/own`` (its own), ``t/inherits`` (tenant
    ``t``'s) and ``u/ns`` (the default); tenant admins ``t-admin`` and ``u-admin``; role
    ``job`` produces everywhere. Group ``other`` covers nothing."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_group(client, "other")
    for tenant in ("t", "u", "v"):
        create_tenant(client, tenant, [f"{tenant}-admin"])
    attach(client, "t", "rg")
    set_default_group(client, "rg")
    for ns in ("t/own", "t/inherits", "u/ns", "v/ns"):
        create_namespace(client, ns, producers=["job"])
    attach(client, "t/own", "rg")
    attach(client, "v/ns", "other")


def sample(app: FastAPI, now: float) -> bool:
    with state_of(app).sessions.begin() as session:
        return history.sample(session, now, state_of(app).settings)


def write_counts(app: FastAPI, now: float) -> None:
    """What the process's upkeep does every second: write the counts complete by ``now``."""
    state = state_of(app)
    with state.sessions.begin() as session:
        history.write_counts(session, state.usage_counter.complete(now), state.writer)


def complete_after_s(app: FastAPI) -> float:
    return history.complete_after_s(state_of(app).settings)


def complete_counts(servers: list[FastAPI], clock: FakeClock, after: float) -> None:
    """Move the clock to when the usage of the moment ``after`` is complete, and write
    every process's counts by then."""
    clock.now = after + complete_after_s(servers[0])
    for app in servers:
        write_counts(app, clock.now)


def usage(
    app: FastAPI, headers: dict[str, str], group: str = "rg", **params: Any
) -> httpx.Response:
    return TestClient(app).get(
        f"/admin/v2/resourcegroups/{group}/usage", params=params, headers=headers
    )


def read(app: FastAPI, auth: Auth, **params: Any) -> dict[str, Any]:
    response = usage(app, auth(SUPERUSER), **params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def samples_stored(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(UsageSample)) or 0)


@pytest.mark.usefixtures("world")
class TestSampling:
    def test_sums_live_reporters_and_every_process_serves_it(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        start = clock.now - clock.now % RESOLUTION_S
        for second in range(1, 11):  # a whole bucket of reports, each covering a second
            clock.now = start + second * INTERVAL_S
            report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))
            report(servers[1], auth("job"), "b", body(clock, 200, ns="t/inherits"))
            report(servers[1], auth("job"), "c", body(clock, 100, ns="u/ns"))
        assert sample(servers[0], clock.now)
        # Until every report that may cover the bucket has come, its usage is unknown.
        now = read(servers[1], auth)
        assert now["dimensions"]["publishRateInMsgs"]["usage"] == [None]
        assert now["namespaces"] == [
            {"namespace": "t/inherits", "source": "tenant", "reporters": 1},
            {"namespace": "t/own", "source": "namespace", "reporters": 1},
            {"namespace": "u/ns", "source": "default", "reporters": 1},
        ]
        complete_counts(servers, clock, clock.now)

        found = read(servers[1], auth)
        assert found["resourceGroup"] == "rg"
        assert found["resolutionSeconds"] == RESOLUTION_S
        assert found["times"] == [start + RESOLUTION_S]
        assert found["reporters"] == [3]
        msgs = found["dimensions"]["publishRateInMsgs"]
        assert msgs["limit"] == [QUOTA]
        assert msgs["usage"] == [pytest.approx(600)]  # counted by both processes, summed
        assert msgs["demand"] == [pytest.approx(600)]
        assert 600 <= msgs["allocation"][0] <= QUOTA * 1.05
        unlimited = found["dimensions"]["publishRateInBytes"]
        assert unlimited["limit"] == [-1]
        assert unlimited["allocation"] == [None]
        # By now they are all gone: the namespaces are as they are now.
        assert [ns["reporters"] for ns in found["namespaces"]] == [0, 0, 0]

    def test_a_group_without_reporters_has_its_limit_and_zeros(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        assert sample(servers[0], clock.now)
        clock.now += complete_after_s(servers[0])
        found = read(servers[0], auth)
        msgs = found["dimensions"]["publishRateInMsgs"]
        assert (found["reporters"], msgs["limit"], msgs["usage"]) == ([0], [QUOTA], [0.0])
        assert (msgs["demand"], msgs["allocation"]) == ([0.0], [0.0])

    def test_a_demand_not_known_yet_is_null_not_a_huge_number(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))
        report(servers[0], auth("job"), "new", body(clock, 1e18, used=0, ns="t/own"))
        assert sample(servers[0], clock.now)
        assert read(servers[0], auth)["dimensions"]["publishRateInMsgs"]["demand"] == [None]

    def test_silent_reporters_are_not_counted(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        report(servers[0], auth("job"), "gone", body(clock, 300, ns="t/own"))
        clock.now += 4 * REPORT_INTERVAL_S
        report(servers[0], auth("job"), "here", body(clock, 100, ns="t/own"))
        assert sample(servers[0], clock.now)
        found = read(servers[0], auth)
        assert found["reporters"] == [1]
        assert found["dimensions"]["publishRateInMsgs"]["demand"] == [pytest.approx(100)]

    def test_a_live_reporter_counts_however_long_ago_its_row_was_written(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        # A paced worker (`app.quota.pacing`) reports once a minute or two and its lease
        # lasts as long; its row holds its figures meanwhile, as the allocator counts them.
        report(servers[0], auth("job"), "paced", body(clock, 300, ns="t/own"))
        with state_of(servers[0]).sessions.begin() as session:
            until = datetime.fromtimestamp(clock.now + 180, UTC)
            UsageRepository.of(session).extend("paced", until)
        clock.now += 150
        report(servers[0], auth("job"), "here", body(clock, 100, ns="t/own"))
        assert sample(servers[0], clock.now)
        found = read(servers[0], auth)
        assert found["reporters"] == [2]
        assert found["dimensions"]["publishRateInMsgs"]["demand"] == [pytest.approx(400)]

    def test_each_moment_is_sampled_once_whichever_process_tries(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        assert sample(servers[0], clock.now)
        assert not sample(servers[1], clock.now)
        assert not sample(servers[0], clock.now + 0.1)
        clock.now += RESOLUTION_S
        # Both at the same instant: the sampling row lets one through.
        barrier = threading.Barrier(2)
        took: list[bool] = []

        def take(app: FastAPI) -> None:
            barrier.wait()
            took.append(sample(app, clock.now))

        threads = [threading.Thread(target=take, args=(app,)) for app in servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(took) == [False, True]
        assert len(read(servers[1], auth)["times"]) == 2

    def test_a_steady_group_is_stored_once_and_holds_at_every_moment(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))
        assert sample(servers[0], clock.now)
        for _ in range(3):
            clock.now += RESOLUTION_S
            report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))  # steady
            assert sample(servers[1], clock.now)
        assert samples_stored(engine) == 2  # rg and other, at the first moment only
        found = read(servers[0], auth)
        assert len(found["times"]) == 4
        assert found["reporters"] == [1] * 4
        assert found["dimensions"]["publishRateInMsgs"]["demand"] == [pytest.approx(300)] * 4

    def test_what_changes_is_sampled_at_the_next_moment(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, client: TestClient
    ) -> None:
        report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))
        assert sample(servers[0], clock.now)
        clock.now += RESOLUTION_S
        report(servers[1], auth("job"), "a", body(clock, 600, ns="t/own"))  # figures moved
        assert sample(servers[0], clock.now)
        clock.now += RESOLUTION_S
        assert client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 500})
        assert sample(servers[0], clock.now)  # the limit, with no report since
        clock.now += RESOLUTION_S
        released = TestClient(servers[1]).delete("/quota/v1/reporters/a", headers=auth("job"))
        assert released.status_code == 204
        assert sample(servers[0], clock.now)  # its reporter gone
        found = read(servers[0], auth)
        msgs = found["dimensions"]["publishRateInMsgs"]
        assert found["reporters"] == [1, 1, 1, 0]
        assert msgs["demand"] == [pytest.approx(u) for u in (300, 600, 600, 0)]
        assert msgs["limit"] == [QUOTA, QUOTA, 500, 500]

    def test_history_is_kept_for_the_retention_and_read_back_for_since(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        start = clock.now - clock.now % RESOLUTION_S
        for step in range(10):
            clock.now = start + step * RESOLUTION_S
            report(servers[0], auth("job"), "a", body(clock, 100 * (step + 1), ns="t/own"))
            assert sample(servers[step % 2], clock.now)
        kept = read(servers[0], auth, since=3600)
        moments = [start + step * RESOLUTION_S for step in range(3, 10)]
        assert kept["times"] == moments
        wanted = kept["dimensions"]["publishRateInMsgs"]["demand"]
        assert wanted == [pytest.approx(100 * (step + 1)) for step in range(3, 10)]
        # What is older than the retention is gone, but the group other's only sample.
        assert samples_stored(engine) == len(moments) + 1
        assert read(servers[0], auth, since=25)["times"] == moments[-3:]

    def test_a_deleted_groups_samples_age_out(
        self, servers: list[FastAPI], clock: FakeClock, client: TestClient, engine: Engine
    ) -> None:
        assert client.put("/admin/v2/resourcegroups/gone", json={}).status_code == 204
        assert sample(servers[0], clock.now)
        assert client.delete("/admin/v2/resourcegroups/gone").status_code == 204
        clock.now += RETENTION_S + RESOLUTION_S
        assert sample(servers[0], clock.now)
        with engine.connect() as connection:
            groups = connection.scalars(select(UsageSample.resource_group).distinct()).all()
        assert sorted(groups) == ["other", "rg"]


@pytest.mark.usefixtures("world")
class TestWhoMayRead:
    def test_admins_of_tenants_using_the_group_may(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        # t uses rg directly, u through the default group.
        for role in ("t-admin", "u-admin"):
            assert usage(servers[0], auth(role)).status_code == 200

    def test_others_get_403_whether_or_not_the_group_exists(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        for group in ("rg", "missing"):
            assert "superusers" in reason(usage(servers[0], auth("v-admin"), group), 403)
        assert "superusers" in reason(usage(servers[0], auth("job")), 403)

    def test_missing_group_no_token_and_bad_since(self, servers: list[FastAPI], auth: Auth) -> None:
        reason(usage(servers[0], auth(SUPERUSER), "missing"), 404)
        reason(usage(servers[0], {}), 401)
        reason(usage(servers[0], auth(SUPERUSER), since=0), 400)
        reason(usage(servers[0], auth(SUPERUSER), since="an hour"), 400)


def test_a_running_server_samples_by_itself(
    database_url: str, secret_key: bytes, engine: Engine, auth: Auth, client: TestClient
) -> None:
    assert client.put("/admin/v2/resourcegroups/rg", json={}).status_code == 204
    settings = make_settings(database_url, secret_key, usage_history_resolution_seconds=0.2)
    with running_app(settings) as app, serve(app) as url:
        deadline = time.monotonic() + 10
        times: list[float] = []
        while len(times) < 2 and time.monotonic() < deadline:
            found = httpx.get(f"{url}/admin/v2/resourcegroups/rg/usage", headers=auth(SUPERUSER))
            times = found.json()["times"]
            time.sleep(0.1)
        assert len(times) >= 2
        assert times[-1] - times[-2] == pytest.approx(0.2)
        took = state_of(app).metrics.registry.get_sample_value(
            "rg_usage_history_sample_seconds_count"
        )
        assert took is not None and took >= 1


@pytest.mark.usefixtures("world")
class TestWhatWentThrough:
    """The history's usage is the units the workers said they used, over the time they used
    them, whatever the reports' own intervals; and a group whose workers stopped reads idle."""

    def test_reports_of_any_interval_count_their_units_where_they_were_used(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        # A worker charges 100 ms slices at 200 msgs/s (20 msgs at each slice's start) and
        # reports when it likes: after a few milliseconds (a wake), a second or a lease, on
        # either server process. A report's own rate swings from 0 to 6,000 msgs/s.
        start = clock.now - clock.now % RESOLUTION_S
        clock.now = start
        assert sample(servers[0], clock.now)
        slices = [start + n * 0.1 for n in range(330)]  # when each slice is charged
        gaps = [0.005, 1.0, 0.003, 8.0, 0.5, 2.5, 0.004, 3.0, 1.2] * 2
        reported = 0
        for index, gap in enumerate(gaps):
            clock.now += gap
            charged = 20 * sum(1 for at in slices if at <= clock.now)
            payload = {
                "sentAtMs": clock.ms(),
                "intervalMs": round(gap * 1000) or 1,
                "namespaces": {
                    "t/own": {"publishMsgs": {"used": charged - reported, "demand": 200.0}}
                },
            }
            report(servers[index % 2], auth("job"), "w", payload)
            reported = charged
        end = clock.now
        assert sample(servers[1], end)
        complete_counts(servers, clock, end)

        found = read(servers[0], auth)
        usage = found["dimensions"]["publishRateInMsgs"]["usage"]
        complete = [(t, u) for t, u in zip(found["times"], usage, strict=True) if u is not None]
        assert len(complete) >= 2
        for moment, used in complete:
            # What went through in the resolution before the moment, counted here.
            sent = 20 * sum(1 for at in slices if moment - RESOLUTION_S <= at < moment)
            assert sent > 0
            assert used == pytest.approx(sent / RESOLUTION_S, rel=0.05), moment

    def test_a_group_whose_workers_stopped_reads_idle_without_any_report(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        start = clock.now - clock.now % RESOLUTION_S
        for second in range(1, 11):
            clock.now = start + second
            report(servers[0], auth("job"), "a", body(clock, 300, ns="t/own"))
            report(servers[1], auth("job"), "b", body(clock, 200, ns="u/ns"))
        stopped = clock.now
        assert sample(servers[0], stopped)
        complete_counts(servers, clock, stopped)
        before = read(servers[0], auth)
        at_stop = before["times"].index(stopped)
        assert before["reporters"][at_stop] == 2
        assert before["dimensions"]["publishRateInMsgs"]["usage"][at_stop] == pytest.approx(500)
        # Nobody reports again, and no process forgets them: their leases run out all the
        # same, and the next moment after that says so.
        with state_of(servers[0]).sessions() as session:
            leases = session.scalars(select(QuotaReporter.lease_until)).all()
        gone = max(
            lease.timestamp() if lease.tzinfo else lease.replace(tzinfo=UTC).timestamp()
            for lease in leases
        )
        clock.now = max(clock.now, gone - gone % RESOLUTION_S + RESOLUTION_S)
        assert sample(servers[1], clock.now)
        complete_counts(servers, clock, clock.now)
        found = read(servers[0], auth)
        msgs = found["dimensions"]["publishRateInMsgs"]
        assert found["reporters"][-1] == 0
        assert msgs["demand"][-1] == 0 and msgs["allocation"][-1] == 0
        assert msgs["usage"][-1] == 0
        assert [ns["reporters"] for ns in found["namespaces"]] == [0, 0, 0]
