"""What tests make: apps, groups, tenants and namespaces through the admin API, as a client
would, the reason of an error answer, and the clock that tests move.

Each function makes one thing and fails the test at once if the server refuses it, so that a
test's setup reads as the list of what it needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from app.state import state_of

ADMIN = "/admin/v2"


@contextmanager
def running_app(settings: Settings, *, clock: Callable[[], float] = time.time) -> Iterator[FastAPI]:
    """The app on `settings`, its database connections closed when the block ends.

    Only a lifespan closes them otherwise, and ``TestClient(app)`` outside a ``with`` runs
    none; under ``serve`` or ``with TestClient(app)`` they are closed twice, which is harmless.
    """
    app = create_app(settings, clock=clock)
    try:
        yield app
    finally:
        state_of(app).engine.dispose()


class FakeClock:
    """Seconds since the epoch, moved by the test: reporters go silent, samples age and tokens
    expire without a test sleeping."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def ms(self) -> int:
        return round(self.now * 1000)

    def advance(self, seconds: float) -> None:
        self.now += seconds


def reason(response: httpx.Response, status: int) -> str:
    """The reason of an error answer, which must have `status` and say nothing else."""
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["reason"], body
    return str(body["reason"])


def _done(response: httpx.Response) -> None:
    request = response.request
    assert response.status_code == 204, f"{request.method} {request.url}: {response.text}"


def create_group(client: httpx.Client, name: str, **rates: float) -> None:
    """ResourceGroup `name` with Pulsar's rate fields (``publishRateInMsgs=10``); unlimited
    where none is given."""
    _done(client.put(f"{ADMIN}/resourcegroups/{name}", json=rates))


def create_tenant(client: httpx.Client, name: str, admins: Sequence[str] = ()) -> None:
    _done(client.put(f"{ADMIN}/tenants/{name}", json={"adminRoles": list(admins)}))


def create_namespace(
    client: httpx.Client,
    namespace: str,
    *,
    group: str | None = None,
    producers: Sequence[str] = (),
) -> None:
    """Namespace ``tenant/name`` of an existing tenant, attached to `group` if given, that each
    of `producers` may produce to."""
    _done(client.put(f"{ADMIN}/namespaces/{namespace}"))
    if group is not None:
        attach(client, namespace, group)
    for role in producers:
        grant(client, namespace, role, "produce")


def attach(client: httpx.Client, holder: str, group: str) -> None:
    """Attach `group` to a tenant (``t``) or a namespace (``t/ns``)."""
    kind = "namespaces" if "/" in holder else "tenants"
    _done(client.post(f"{ADMIN}/{kind}/{holder}/resourcegroup/{group}"))


def set_default_group(client: httpx.Client, group: str) -> None:
    _done(client.post(f"{ADMIN}/default-resourcegroup/{group}"))


def grant(client: httpx.Client, namespace: str, role: str, *actions: str) -> None:
    body: list[Any] = list(actions)
    _done(client.post(f"{ADMIN}/namespaces/{namespace}/permissions/{role}", json=body))
