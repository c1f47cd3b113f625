"""``DELETE /quota/v1/jobs/{jobId}``: every reporter of a job that the caller's role owns
released at once, through HTTP on both databases."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, make_url, select
from sqlalchemy.orm import Session

from app.db import sqlalchemy_url, upgrade_schema
from app.models import QuotaGroup, QuotaReporter
from app.quota.repository import UsageRepository
from app.quota.schemas import REPORTER_ID_PATTERN
from rgspark import ResourceGroupClient
from rgspark.wire import JOB_ID_PATTERN, job_of, job_reporter_id
from tests.app.test_quota_reports import INTERVAL_S, QUOTA, allocated, body, report
from tests.check import assert_store_consistent
from tests.conftest import POSTGRES_URL, SUPERUSER
from tests.factories import FakeClock, create_group, create_namespace, create_tenant

Auth = Callable[[str], dict[str, str]]


@pytest.fixture
def world(client: TestClient) -> None:
    """Group ``rg`` (publish 1000 msgs/s) on ``t/ns``; roles ``job`` and ``other`` produce
    to it."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg", producers=["job", "other"])


def reporter_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.scalars(select(QuotaReporter.reporter_id)))


def wake(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(QuotaGroup.wake).where(QuotaGroup.name == "rg")) or 0)


def release(app: FastAPI, job: str, headers: dict[str, str]) -> int:
    return TestClient(app).delete(f"/quota/v1/jobs/{job}", headers=headers).status_code


@pytest.mark.usefixtures("world")
class TestReleaseJob:
    def test_only_the_jobs_reporters_go(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        made = job_reporter_id("ab_c")
        assert job_of(made) == "ab_c"
        released = {"ab_c-1", "ab_c-2-x", made}
        # Ids next to the job's in every order that a careless match would take in: "_" is
        # LIKE's any character, a longer or other-case job shares its first letters, and an
        # id without a job (rgspark's before jobs) is 32 hex digits.
        kept = {"abXc-1", "ab_cd-1", "ab_c_-1", "AB_C-1", "ab_c", "ab-1", "ab_b-1", "ab_d-1"}
        kept.add("0123456789abcdef0123456789abcdef")
        for reporter in sorted(released | kept):
            report(servers[0], auth("job"), reporter, body(clock, 10))

        assert release(servers[1], "ab_c", auth("job")) == 204

        assert reporter_ids(engine) == kept

    def test_only_the_callers_roles_reporters_go(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        for role in ("job", "other"):
            for n in range(2):
                report(servers[0], auth(role), f"j1-{role}{n}", body(clock, 10))
        # A role that owns none of them learns nothing: 204, and nothing goes.
        assert release(servers[0], "j1", auth("stranger")) == 204
        assert len(reporter_ids(engine)) == 4

        assert release(servers[0], "j1", auth("other")) == 204
        assert reporter_ids(engine) == {"j1-job0", "j1-job1"}
        # A superuser's: any role's.
        assert release(servers[1], "j1", auth(SUPERUSER)) == 204
        assert reporter_ids(engine) == set()

    def test_their_shares_are_free_at_the_next_report(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        database_url: str,
    ) -> None:
        job = auth("job")
        for _ in range(4):
            clock.now += INTERVAL_S
            for reporter in ("done-a", "done-b", "staying"):
                rate = allocated(report(servers[0], job, reporter, body(clock, 800)))
        assert rate == pytest.approx(QUOTA / 3, rel=0.05)
        woken = wake(engine)

        assert release(servers[0], "done", job) == 204

        assert wake(engine) > woken  # the others learn of it at once (`app.quota.leases`)
        for app in servers:  # the process that released it, and another
            assert allocated(report(app, job, "staying", body(clock, 800))) == pytest.approx(
                QUOTA, rel=0.05
            )
        assert reporter_ids(engine) == {"staying"}
        assert_store_consistent(database_url, now=clock.now)

    def test_a_job_with_none_left_is_204_and_changes_nothing(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, unchanged: Any
    ) -> None:
        report(servers[0], auth("job"), "twice-a", body(clock, 10))
        assert release(servers[0], "twice", auth("job")) == 204
        with unchanged():
            assert release(servers[1], "twice", auth("job")) == 204  # again
            assert release(servers[0], "never_reported", auth("job")) == 204

    @pytest.mark.parametrize("job", ["a-b", "a.b", "x" * 33, "é", "a%20b"])
    def test_a_bad_job_id_is_400(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, unchanged: Any, job: str
    ) -> None:
        report(servers[0], auth("job"), "a-b", body(clock, 10))
        with unchanged():
            response = TestClient(servers[0]).delete(f"/quota/v1/jobs/{job}", headers=auth("job"))
        assert response.status_code == 400, response.text
        assert "jobId" in response.json()["reason"]

    @pytest.mark.parametrize("authorization", [None, "Bearer garbage"])
    def test_without_a_valid_token_it_is_401(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        unchanged: Any,
        authorization: str | None,
    ) -> None:
        report(servers[0], auth("job"), "j-a", body(clock, 10))
        headers = {} if authorization is None else {"Authorization": authorization}
        with unchanged():
            response = TestClient(servers[0]).delete("/quota/v1/jobs/j", headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_rgsparks_ids_are_the_servers() -> None:
    job = ResourceGroupClient("http://127.0.0.1:1", tenant="t", namespace="ns").job
    assert re.fullmatch(JOB_ID_PATTERN, job)
    for made in (job, "x" * 32):
        reporter = job_reporter_id(made)
        assert re.fullmatch(REPORTER_ID_PATTERN, reporter) and job_of(reporter) == made
    assert job_of(uuid.uuid4().hex) is None  # an id made without a job


@contextmanager
def icu_database() -> Iterator[str]:
    """A new PostgreSQL database whose collation is ICU's English (case and punctuation
    weighed as a language does, not byte by byte), migrated; dropped afterwards."""
    name = f"rg_test_icu_{uuid.uuid4().hex[:12]}"
    admin = create_engine(sqlalchemy_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(
            f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en' LOCALE 'C.UTF-8'"
        )
    try:
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        upgrade_schema(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.mark.postgresql
def test_a_jobs_range_is_compared_byte_by_byte_whatever_the_collation() -> None:
    # In ICU's English, "AB-1" sorts between "ab-" and "ab.": a range compared in the
    # database's collation would take another job's reporter.
    ids = ["ab-1", "ab-2-x", "AB-1", "Ab-1", "ab_1", "abc-1", "ab"]
    with icu_database() as url:
        engine = create_engine(sqlalchemy_url(url))
        try:
            with Session(engine) as session, session.begin():
                lease = datetime.now(UTC)
                session.add_all(
                    QuotaReporter(reporter_id=r, role="job", lease_until=lease) for r in ids
                )
            with Session(engine) as session, session.begin():
                found = UsageRepository.of(session).job_reporters("ab", None)
        finally:
            engine.dispose()
    assert found == ["ab-1", "ab-2-x"]
