"""Writers racing through the API: no 500s, no attachment left dangling (on both databases);
and fifty writers on two server processes on PostgreSQL: no 5xx at all, and the database
holds exactly what the writers were told."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, make_url, text

from tests.app.processes import rgadmin_servers
from tests.check import assert_store_consistent
from tests.conftest import SUPERUSER
from tests.factories import create_group, create_namespace, create_tenant

GROUPS = [f"g{i}" for i in range(3)]
NAMESPACES = [f"n{i}" for i in range(4)]
THREADS = 8
OPERATIONS_PER_THREAD = 60

# What each racing operation may answer; anything else (a 500 above all) is a failure.
ALLOWED = {
    "attach": {204, 404, 412},
    "detach": {204, 404},
    "attach_tenant": {204, 412},
    "delete_group": {204, 404, 412},
    "create_group": {204},
    "delete_namespace": {204, 404},
    "create_namespace": {204, 409},
}


def operations(rng: random.Random) -> Iterator[tuple[str, str, str]]:
    for _ in range(OPERATIONS_PER_THREAD):
        group, namespace = rng.choice(GROUPS), rng.choice(NAMESPACES)
        yield rng.choice(
            [
                ("attach", "POST", f"/admin/v2/namespaces/t/{namespace}/resourcegroup/{group}"),
                ("detach", "DELETE", f"/admin/v2/namespaces/t/{namespace}/resourcegroup"),
                ("attach_tenant", "POST", f"/admin/v2/tenants/t/resourcegroup/{group}"),
                ("delete_group", "DELETE", f"/admin/v2/resourcegroups/{group}"),
                ("create_group", "PUT", f"/admin/v2/resourcegroups/{group}"),
                ("delete_namespace", "DELETE", f"/admin/v2/namespaces/t/{namespace}"),
                ("create_namespace", "PUT", f"/admin/v2/namespaces/t/{namespace}"),
            ]
        )


def test_racing_attach_detach_and_deletes(
    app: FastAPI,
    client: TestClient,
    engine: Engine,
    auth: Callable[[str], dict[str, str]],
    database_url: str,
) -> None:
    for group in GROUPS:
        create_group(client, group, publishRateInMsgs=10)
    create_tenant(client, "t")
    for namespace in NAMESPACES:
        create_namespace(client, f"t/{namespace}")

    def worker(seed: int) -> Counter[tuple[str, int]]:
        thread_client = TestClient(app, headers=auth(SUPERUSER))
        seen: Counter[tuple[str, int]] = Counter()
        for name, method, path in operations(random.Random(seed)):
            body: dict[str, Any] | None = {} if name == "create_group" else None
            seen[name, thread_client.request(method, path, json=body).status_code] += 1
        return seen

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = sum(pool.map(worker, range(THREADS)), Counter())

    unexpected = {key: n for key, n in outcomes.items() if key[1] not in ALLOWED[key[0]]}
    assert not unexpected, unexpected
    # The race really happened: conflicting outcomes of the same operation were both seen.
    assert outcomes["attach", 204] and outcomes["delete_group", 204]

    with engine.connect() as connection:
        dangling = connection.execute(
            text(
                "SELECT count(*) FROM namespaces n LEFT JOIN resource_groups g"
                " ON g.name = n.resource_group"
                " WHERE n.resource_group IS NOT NULL AND g.name IS NULL"
            )
        ).scalar_one()
    assert dangling == 0
    for namespace in NAMESPACES:
        attached = client.get(f"/admin/v2/namespaces/t/{namespace}/resourcegroup")
        if attached.status_code == 200 and attached.json() is not None:
            assert client.get(f"/admin/v2/resourcegroups/{attached.json()}").status_code == 200
    assert_store_consistent(database_url)


# Fifty writers on two server processes (`rgadmin serve`), each alternating between them.
# Every writer owns some names (its namespaces and groups, which no one else writes), so what
# they hold at the end follows from its own answers alone; and all of them fight over shared
# rows (groups' rates and deletes, the tenants' attachments, the default group), which is
# where writers' locks meet.
WRITERS = 50
WRITES_PER_WRITER = 30
TENANTS = [f"t{i}" for i in range(3)]
SHARED = [f"s{i}" for i in range(4)]
SERVER_ERROR = 500

RACING_ALLOWED = {
    "create_own_group": {204},
    "delete_own_group": {204, 404, 412},
    "rate_shared": {204},
    "delete_shared": {204, 404, 412},
    "create_own_namespace": {204},
    "delete_own_namespace": {204},
    "attach_own": {204, 412},
    "detach_own": {204},
    "attach_tenant": {204, 412},
    "set_default": {204, 412},
    "remove_default": {204},
}


@pytest.fixture
def two_servers(
    database_url: str, secret_key: bytes, engine: Engine, tmp_path: Path
) -> Iterator[list[str]]:
    """Two ``rgadmin serve`` processes on the test database (PostgreSQL only)."""
    if make_url(database_url).get_backend_name() != "postgresql":
        pytest.skip("concurrent writers across processes are measured on PostgreSQL")
    with rgadmin_servers(database_url, secret_key, tmp_path) as urls:
        yield urls


@dataclass
class Writer:
    """One writer's view: what it owns holds what its own successful answers say."""

    number: int
    namespaces: dict[str, str | None] = field(default_factory=dict)
    """Its namespaces that exist, with their own group."""
    groups: set[str] = field(default_factory=set)
    rates: dict[str, set[int]] = field(default_factory=dict)
    """Rates it set successfully on shared groups."""
    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    created: int = 0

    @property
    def tenant(self) -> str:
        return TENANTS[self.number % len(TENANTS)]

    def write(self, client: httpx.Client, rng: random.Random) -> None:
        name, method, path, body, then = self._choose(rng)
        response = client.request(method, path, json=body)
        self.answers[name, response.status_code] += 1
        if response.status_code == 204:
            then()

    def _choose(self, rng: random.Random) -> tuple[str, str, str, Any, Callable[[], None]]:
        own_ns = list(self.namespaces)
        own_groups = sorted(self.groups)
        shared = rng.choice(SHARED)
        choices: list[tuple[str, str, str, Any, Callable[[], None]]] = []
        fresh = f"w{self.number}-{self.created}"
        choices.append(
            (
                "create_own_group",
                "PUT",
                f"/admin/v2/resourcegroups/{fresh}-g",
                {},
                lambda: self._created_group(f"{fresh}-g"),
            )
        )
        choices.append(
            (
                "create_own_namespace",
                "PUT",
                f"/admin/v2/namespaces/{self.tenant}/{fresh}-n",
                None,
                lambda: self._created_namespace(f"{fresh}-n"),
            )
        )
        rate = rng.randrange(1, 1_000_000)
        choices.append(
            (
                "rate_shared",
                "PUT",
                f"/admin/v2/resourcegroups/{shared}",
                {"publishRateInMsgs": rate},
                lambda: self.rates.setdefault(shared, set()).add(rate),
            )
        )
        choices.append(
            ("delete_shared", "DELETE", f"/admin/v2/resourcegroups/{shared}", None, lambda: None)
        )
        choices.append(
            (
                "attach_tenant",
                "POST",
                f"/admin/v2/tenants/{self.tenant}/resourcegroup/{shared}",
                None,
                lambda: None,
            )
        )
        choices.append(
            ("set_default", "POST", f"/admin/v2/default-resourcegroup/{shared}", None, lambda: None)
        )
        choices.append(
            ("remove_default", "DELETE", "/admin/v2/default-resourcegroup", None, lambda: None)
        )
        if own_groups:
            group = rng.choice(own_groups)
            choices.append(
                (
                    "delete_own_group",
                    "DELETE",
                    f"/admin/v2/resourcegroups/{group}",
                    None,
                    lambda: self.groups.discard(group),
                )
            )
        if own_ns:
            ns = rng.choice(own_ns)
            target = rng.choice([shared, *own_groups])
            base = f"/admin/v2/namespaces/{self.tenant}/{ns}"
            choices.append(
                (
                    "attach_own",
                    "POST",
                    f"{base}/resourcegroup/{target}",
                    None,
                    lambda: self.namespaces.__setitem__(ns, target),
                )
            )
            choices.append(
                (
                    "detach_own",
                    "DELETE",
                    f"{base}/resourcegroup",
                    None,
                    lambda: self.namespaces.__setitem__(ns, None),
                )
            )
            choices.append(
                ("delete_own_namespace", "DELETE", base, None, lambda: self._deleted_namespace(ns))
            )
        return rng.choice(choices)

    def _deleted_namespace(self, name: str) -> None:
        del self.namespaces[name]

    def _created_group(self, name: str) -> None:
        self.groups.add(name)
        self.created += 1

    def _created_namespace(self, name: str) -> None:
        self.namespaces[name] = None
        self.created += 1


def test_fifty_writers_on_two_processes(
    client: TestClient,
    two_servers: list[str],
    engine: Engine,
    auth: Callable[[str], dict[str, str]],
    database_url: str,
) -> None:
    for group in SHARED:
        assert (
            client.put(
                f"/admin/v2/resourcegroups/{group}", json={"publishRateInMsgs": 10}
            ).status_code
            == 204
        )
    for tenant in TENANTS:
        assert client.put(f"/admin/v2/tenants/{tenant}", json={}).status_code == 204
    writers = [Writer(number) for number in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)

    def run(writer: Writer) -> None:
        rng = random.Random(writer.number)
        # Each writer alternates between the processes, request by request.
        clients = [
            httpx.Client(base_url=url, headers=auth(SUPERUSER), timeout=60) for url in two_servers
        ]
        try:
            barrier.wait()
            for i in range(WRITES_PER_WRITER):
                writer.write(clients[(writer.number + i) % 2], rng)
        finally:
            for each in clients:
                each.close()

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(run, writers))

    answers = sum((writer.answers for writer in writers), Counter())
    assert sum(answers.values()) == WRITERS * WRITES_PER_WRITER
    failed = {key: n for key, n in answers.items() if key[1] >= SERVER_ERROR}
    assert not failed, answers
    unexpected = {key: n for key, n in answers.items() if key[1] not in RACING_ALLOWED[key[0]]}
    assert not unexpected, unexpected

    with engine.connect() as connection:

        def rows(sql: str) -> list[Any]:
            return list(connection.execute(text(sql)))

        # Nothing points at a group that does not exist.
        for table in ("namespaces", "tenants", "default_resource_group"):
            assert (
                rows(
                    f"SELECT x.resource_group FROM {table} x LEFT JOIN resource_groups g"
                    " ON g.name = x.resource_group"
                    " WHERE x.resource_group IS NOT NULL AND g.name IS NULL"
                )
                == []
            )
        # What each writer owns is what its own answers say, row for row.
        namespaces = {
            (tenant, name): group
            for tenant, name, group in rows(
                "SELECT tenant, name, resource_group FROM namespaces WHERE name LIKE 'w%'"
            )
        }
        assert namespaces == {
            (writer.tenant, name): group
            for writer in writers
            for name, group in writer.namespaces.items()
        }
        groups = {name for (name,) in rows("SELECT name FROM resource_groups WHERE name LIKE 'w%'")}
        assert groups == {group for writer in writers for group in writer.groups}
        # The counts match the successful answers.
        created = answers["create_own_namespace", 204] - answers["delete_own_namespace", 204]
        assert len(namespaces) == created
        assert len(groups) == answers["create_own_group", 204] - answers["delete_own_group", 204]
        # A shared group holds a rate some writer was told it set (or its first one).
        written = {rate for writer in writers for rates in writer.rates.values() for rate in rates}
        for name, rate in rows(
            "SELECT name, publish_rate_in_msgs FROM resource_groups WHERE name LIKE 's%'"
        ):
            assert rate in written | {10}, name
    # The race happened: contended writes both succeeded and were refused.
    assert answers["delete_shared", 412] and answers["attach_own", 204]
    assert_store_consistent(database_url)
