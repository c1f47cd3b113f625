"""Writers racing through the API: no 500s, no attachment left dangling (on both databases)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from tests.conftest import SUPERUSER

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
    app: FastAPI, client: TestClient, engine: Engine, auth: Callable[[str], dict[str, str]]
) -> None:
    for group in GROUPS:
        client.put(f"/admin/v2/resourcegroups/{group}", json={"publishRateInMsgs": 10})
    client.put("/admin/v2/tenants/t", json={})
    for namespace in NAMESPACES:
        client.put(f"/admin/v2/namespaces/t/{namespace}")

    def worker(seed: int) -> Counter[tuple[str, int]]:
        thread_client = TestClient(app, headers=auth(SUPERUSER))
        seen: Counter[tuple[str, int]] = Counter()
        for name, method, path in operations(random.Random(seed)):
            body = {} if name == "create_group" else None
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
