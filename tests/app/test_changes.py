"""``GET /quota/v1/changes``: a long poll answered as soon as an admin write commits, by
whichever server process took it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.quota.tuning import POLL_S
from tests.app.processes import rgadmin_servers
from tests.conftest import SUPERUSER

Auth = Callable[[str], dict[str, str]]


@pytest.fixture
def servers(
    database_url: str, secret_key: bytes, engine: Engine, tmp_path: Path
) -> Iterator[list[str]]:
    """Two server processes on PostgreSQL, one on SQLite (the embedded default)."""
    count = 2 if database_url.startswith("postgresql") else 1
    with rgadmin_servers(database_url, secret_key, tmp_path, count) as urls:
        yield urls


def test_a_new_watcher_gets_the_generation_at_once(client: TestClient) -> None:
    first = client.get("/quota/v1/changes")
    assert first.status_code == 200
    generation = first.json()["generation"]
    assert (
        client.put("/admin/v2/resourcegroups/g", json={"publishRateInMsgs": 5}).status_code == 204
    )
    # Behind already: answered without waiting.
    started = time.monotonic()
    later = client.get("/quota/v1/changes", params={"after": generation})
    assert time.monotonic() - started < 5
    assert later.json()["generation"] > generation


def test_a_watcher_without_news_waits_as_long_as_it_asked(client: TestClient) -> None:
    generation = client.get("/quota/v1/changes").json()["generation"]
    started = time.monotonic()
    same = client.get("/quota/v1/changes", params={"after": generation, "waitMs": 500})
    elapsed = time.monotonic() - started
    assert same.json() == {"generation": generation}
    assert 0.5 <= elapsed < 5


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"waitMs": -1}, "greater than or equal to 0"),
        ({"waitMs": 60_001}, "less than or equal"),
        ({"after": "x"}, "valid integer"),
        ({"group": "rg"}, "Invalid query parameter 'group': 'rg' is not WAKE:NAME"),
        ({"group": "x:rg"}, "'x:rg' is not WAKE:NAME"),
        ({"group": "1:a/b"}, "'1:a/b' is not WAKE:NAME"),
        ({"group": ""}, "'' is not WAKE:NAME"),
        ({"group": "1:."}, "'1:.' is not WAKE:NAME"),
    ],
)
def test_bad_parameters_are_named(
    client: TestClient, params: dict[str, object], problem: str
) -> None:
    response = client.get("/quota/v1/changes", params=params)
    assert response.status_code == 400
    assert problem in response.text


def test_anonymous_callers_are_refused(anonymous: TestClient) -> None:
    assert anonymous.get("/quota/v1/changes").status_code == 401


def test_a_write_on_any_process_wakes_every_watcher_at_once(servers: list[str], auth: Auth) -> None:
    role = auth("etl-job")  # any role may watch: it learns only that something changed
    admin = httpx.Client(base_url=servers[-1], headers=auth(SUPERUSER), timeout=30)
    generation = httpx.get(f"{servers[0]}/quota/v1/changes", headers=role).json()["generation"]

    def watch(url: str) -> tuple[int, float]:
        response = httpx.get(
            f"{url}/quota/v1/changes",
            params={"after": generation, "waitMs": 20_000},
            headers=role,
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.json()["generation"], time.monotonic()

    watchers = [servers[i % len(servers)] for i in range(20)]
    with ThreadPoolExecutor(len(watchers)) as pool:
        answers = [pool.submit(watch, url) for url in watchers]
        time.sleep(1.0)  # every watcher is waiting
        assert not any(answer.done() for answer in answers)
        assert (
            admin.put("/admin/v2/resourcegroups/cut", json={"publishRateInMsgs": 1}).status_code
            == 204
        )
        written = time.monotonic()
        results = [answer.result(timeout=30) for answer in answers]
    admin.close()

    assert all(new > generation for new, _ in results)
    # Within a poll of each process, and a round trip: generously, a second.
    slowest = max(at for _, at in results) - written
    assert slowest < 1.0, (
        f"the last watcher heard of the write {slowest:.2f} s after it ({POLL_S=})"
    )
