"""Cached ResourceGroup reads never outlive a write, whichever process made it; a cached
read costs no query, and on SQLite a write drops only the groups it touched."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text

from app import generation
from app.readcache import GenerationWatch, GroupEntry, PostgresGroupCache
from app.state import state_of
from tests.app.processes import rgadmin_servers
from tests.conftest import SUPERUSER, make_settings
from tests.factories import create_group, create_namespace, create_tenant, running_app

Auth = Callable[[str], dict[str, str]]
GROUP = "/admin/v2/resourcegroups/rg"


@pytest.fixture
def other_server(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[FastAPI]:
    """A second server on the same database, as another worker process would be."""
    with running_app(make_settings(database_url, secret_key)) as app:
        yield app


def test_a_write_elsewhere_is_seen_by_the_next_read(
    client: TestClient, other_server: FastAPI, auth: Auth
) -> None:
    other = TestClient(other_server, headers=auth(SUPERUSER))
    assert client.get(GROUP).status_code == 404
    other.put(GROUP, json={"publishRateInMsgs": 1})
    assert client.get(GROUP).json()["publishRateInMsgs"] == 1
    for rate in (2, 3, 4):
        other.put(GROUP, json={"publishRateInMsgs": rate})
        assert client.get(GROUP).json()["publishRateInMsgs"] == rate
    other.delete(GROUP)
    assert client.get(GROUP).status_code == 404


def test_who_may_read_follows_attachments_made_elsewhere(
    client: TestClient, other_server: FastAPI, auth: Auth
) -> None:
    other = TestClient(other_server, headers=auth(SUPERUSER))
    create_group(other, "rg")
    create_tenant(other, "t", ["tenant-admin"])
    create_namespace(other, "t/ns")
    admin = auth("tenant-admin")
    assert client.get(GROUP, headers=admin).status_code == 403
    other.post("/admin/v2/namespaces/t/ns/resourcegroup/rg")
    assert client.get(GROUP, headers=admin).status_code == 200
    other.post("/admin/v2/tenants/t", json={"adminRoles": []})
    assert client.get(GROUP, headers=admin).status_code == 403


@contextmanager
def queries_of(app: FastAPI) -> Iterator[list[str]]:
    """The statements the app runs through its engine while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    engine = state_of(app).engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_cached_read_runs_no_query(app: FastAPI, client: TestClient) -> None:
    client.put(GROUP, json={"publishRateInMsgs": 1})
    assert client.get(GROUP).status_code == 200
    with queries_of(app) as seen:
        assert client.get(GROUP).json()["publishRateInMsgs"] == 1
    assert seen == []


def test_a_write_drops_only_the_groups_it_touched(
    app: FastAPI, client: TestClient, other_server: FastAPI, auth: Auth
) -> None:
    """On SQLite; on PostgreSQL any admin write drops every entry."""
    if state_of(app).engine.dialect.name != "sqlite":
        pytest.skip("per-group invalidation is SQLite's")
    other = TestClient(other_server, headers=auth(SUPERUSER))
    client.put(GROUP, json={"publishRateInMsgs": 1})
    client.get(GROUP)
    for method, path, body in (
        ("PUT", "/admin/v2/resourcegroups/unrelated", {"publishRateInMsgs": 2}),
        ("PUT", "/admin/v2/tenants/t", {"adminRoles": ["x"]}),
        ("PUT", "/admin/v2/namespaces/t/ns", None),
        ("POST", "/admin/v2/namespaces/t/ns/resourcegroup/unrelated", None),
    ):
        assert other.request(method, path, json=body).status_code == 204
        with queries_of(app) as seen:
            assert client.get(GROUP).json()["publishRateInMsgs"] == 1
        assert seen == []
    # Groups whose readers change are dropped: the default group covers t/other now.
    other.post("/admin/v2/default-resourcegroup/rg")
    assert client.get(GROUP, headers=auth("x")).status_code == 403
    other.put("/admin/v2/namespaces/t/other")
    assert client.get(GROUP, headers=auth("x")).status_code == 200
    other.post("/admin/v2/namespaces/t/other/resourcegroup/unrelated")
    assert client.get(GROUP, headers=auth("x")).status_code == 403
    other.delete("/admin/v2/namespaces/t/other/resourcegroup")
    assert client.get(GROUP, headers=auth("x")).status_code == 200
    other.post("/admin/v2/tenants/t", json={"adminRoles": ["y"]})
    assert client.get(GROUP, headers=auth("x")).status_code == 403


def test_log_entries_lost_to_a_process_drop_everything(
    app: FastAPI, client: TestClient, engine: Engine
) -> None:
    if state_of(app).engine.dialect.name != "sqlite":
        pytest.skip("the log of changed groups is SQLite's")
    client.put(GROUP, json={"publishRateInMsgs": 1})
    client.get(GROUP)
    # More changes than the log keeps, rg's first: its entry is gone before the next read.
    with engine.begin() as connection:
        connection.execute(text("UPDATE resource_groups SET publish_rate_in_msgs = 5"))
        for number in range(1100):
            connection.execute(
                text(
                    "INSERT INTO resource_groups VALUES (:name, -1, -1, -1, -1, -1, -1, 'enforce')"
                ).bindparams(name=f"many{number}")
            )
    assert client.get(GROUP).json()["publishRateInMsgs"] == 5


def test_without_the_generation_reads_go_to_the_database() -> None:
    """While the generation cannot be read (the database is away), nothing is served from
    memory, and the lookup says so at once."""

    def unreachable() -> psycopg.Connection[Any]:
        return psycopg.connect("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)

    cache = PostgresGroupCache(GenerationWatch(unreachable))
    entry = GroupEntry(None, frozenset())

    async def twice() -> list[tuple[GroupEntry | None, int | None]]:
        first = await cache.lookup("rg")
        cache.put("rg", entry, first[1])
        return [first, await cache.lookup("rg")]

    assert asyncio.run(twice()) == [(None, None), (None, None)]


class CountingWatch(GenerationWatch):
    def __init__(self, engine: Engine) -> None:
        watch = GenerationWatch.for_engine(engine)
        super().__init__(watch._connect)
        self.readings: list[float] = []

    def _read(self, connection: Any) -> Any:
        self.readings.append(time.perf_counter())
        return super()._read(connection)


def test_lookups_share_readings_started_after_they_asked(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the generation is read per lookup on PostgreSQL")
    watch = CountingWatch(engine)

    async def lookups() -> list[tuple[float, int | None]]:
        async def one() -> tuple[float, int | None]:
            asked = time.perf_counter()
            return asked, await watch.current()

        return await asyncio.gather(*(one() for _ in range(200)))

    answers = asyncio.run(lookups())
    with engine.connect() as connection:
        expected = generation.current(connection)
    assert {value for _, value in answers} == {expected}
    assert len(watch.readings) < len(answers) / 2
    # Each lookup had a reading that started after it asked.
    for asked, _ in answers:
        assert any(started >= asked for started in watch.readings)


@pytest.fixture
def processes(
    database_url: str, secret_key: bytes, engine: Engine, tmp_path: Path
) -> Iterator[list[str]]:
    with rgadmin_servers(database_url, secret_key, tmp_path) as urls:
        yield urls


def test_a_read_after_a_write_elsewhere_never_sees_the_old_value(
    client: TestClient, processes: list[str], auth: Auth
) -> None:
    """Two server processes: each write's answer from one, then at once a read from the
    other, whose cache held the value the write replaced."""
    writer, reader = (httpx.Client(base_url=url, headers=auth(SUPERUSER)) for url in processes)
    admin = httpx.Client(base_url=processes[1], headers=auth("tenant-admin"))
    with writer, reader, admin:
        assert writer.put(GROUP, json={"publishRateInMsgs": 0}).status_code == 204
        for rate in range(1, 101):
            assert reader.get(GROUP).json()["publishRateInMsgs"] == rate - 1  # cached
            assert reader.get(GROUP).json()["publishRateInMsgs"] == rate - 1
            assert writer.put(GROUP, json={"publishRateInMsgs": rate}).status_code == 204
            assert reader.get(GROUP).json()["publishRateInMsgs"] == rate
        # Who may read follows too.
        create_tenant(writer, "t", ["tenant-admin"])
        create_namespace(writer, "t/ns")
        for _ in range(10):
            assert admin.get(GROUP).status_code == 403
            writer.post("/admin/v2/namespaces/t/ns/resourcegroup/rg")
            assert admin.get(GROUP).status_code == 200
            writer.delete("/admin/v2/namespaces/t/ns/resourcegroup")
        assert admin.get(GROUP).status_code == 403
        assert writer.delete(GROUP).status_code == 204
        assert reader.get(GROUP).status_code == 404
