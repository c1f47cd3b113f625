"""Every write to groups, tenants, namespaces and the default group changes the admin
generation (by triggers), on both databases: what lets server processes keep namespaces'
groups and group reads in memory. And on PostgreSQL, writers do not wait for each other
for it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app import generation
from app.models import COMPACTED_WRITER
from tests.factories import create_group, create_namespace, create_tenant


def current(engine: Engine) -> int:
    with engine.connect() as connection:
        return generation.current(connection)


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/admin/v2/resourcegroups/new", {"publishRateInMsgs": 5}),
        ("PUT", "/admin/v2/resourcegroups/rg", {"publishRateInMsgs": 7}),
        ("DELETE", "/admin/v2/resourcegroups/spare", None),
        ("PUT", "/admin/v2/tenants/other", {"adminRoles": []}),
        ("POST", "/admin/v2/tenants/t/resourcegroup/rg", None),
        ("PUT", "/admin/v2/namespaces/t/new", None),
        ("POST", "/admin/v2/namespaces/t/ns/resourcegroup/rg", None),
        ("DELETE", "/admin/v2/namespaces/t/ns", None),
        ("POST", "/admin/v2/default-resourcegroup/rg", None),
    ],
)
def test_admin_writes_change_the_generation(
    client: TestClient, engine: Engine, method: str, path: str, body: Any
) -> None:
    create_group(client, "rg", publishRateInMsgs=1)
    create_group(client, "spare", publishRateInMsgs=1)
    create_tenant(client, "t")
    create_namespace(client, "t/ns")
    before = current(engine)
    response = client.request(method, path, json=body)
    assert response.status_code == 204, response.text
    assert current(engine) != before


def test_a_write_by_hand_changes_it_too(client: TestClient, engine: Engine) -> None:
    client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 1})
    before = current(engine)
    with engine.begin() as connection:
        connection.execute(text("UPDATE resource_groups SET publish_rate_in_msgs = 2"))
    assert current(engine) != before


def test_a_rejected_write_leaves_it(client: TestClient, engine: Engine) -> None:
    before = current(engine)
    assert client.post("/admin/v2/tenants/missing/resourcegroup/rg").status_code == 404
    assert current(engine) == before


def test_it_never_comes_back_after_its_rows_are_deleted(client: TestClient, engine: Engine) -> None:
    # What a process remembers under a generation must not be taken for current again.
    seen = set()
    for rate in range(1, 6):
        client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": rate})
        seen.add(current(engine))
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM admin_changes"))
    for rate in range(1, 6):
        client.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": rate})
        assert current(engine) not in seen


def test_writers_do_not_wait_for_each_other(client: TestClient, engine: Engine) -> None:
    """One transaction writes a group and stays open; another writes another group and
    commits: once all admin writes queued for one generation row (and deadlocked)."""
    if not is_postgresql(engine):
        pytest.skip("SQLite's writers take turns by design")
    for name in ("a", "b"):
        client.put(f"/admin/v2/resourcegroups/{name}", json={})
    committed = threading.Event()
    with engine.connect() as first:
        first.execute(text("UPDATE resource_groups SET publish_rate_in_msgs = 1 WHERE name = 'a'"))

        def second() -> None:
            with engine.begin() as connection:
                connection.execute(text("SET LOCAL lock_timeout = '5s'"))
                connection.execute(
                    text("UPDATE resource_groups SET publish_rate_in_msgs = 2 WHERE name = 'b'")
                )
            committed.set()

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(timeout=10)
        assert committed.is_set(), "the second writer waited for the first"
        between = current(engine)
        first.commit()
    assert current(engine) != between


def test_compacting_keeps_it(client: TestClient, engine: Engine) -> None:
    if not is_postgresql(engine):
        pytest.skip("one row on SQLite")
    client.put("/admin/v2/resourcegroups/rg", json={})
    # Rows of writers that are gone: process ids no backend has (above the kernel's maximum).
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO admin_changes (writer, changes)"
                " VALUES (9000000001, 5), (9000000002, 7)"
            )
        )
    before = current(engine)
    with Session(engine) as session, session.begin():
        generation.compact(session)
    assert current(engine) == before
    with engine.connect() as connection:
        writers = {row[0] for row in connection.execute(text("SELECT writer FROM admin_changes"))}
    assert not writers & {9000000001, 9000000002}
    assert COMPACTED_WRITER in writers
