"""The watch on changes when the server goes away: the real server, in-process on a real port,
stops while a worker's watcher holds its long poll, and comes back on the same port and
database. The watcher backs off without spinning, and watches again once the server is back.
Real time, with margins."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth import create_token, generate_secret_key
from app.config import Settings
from app.db import upgrade_schema
from rgspark._admin import AdminClient
from rgspark._exceptions import AdminServerError
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.conftest import SUPERUSER, free_port, make_settings, serve
from tests.factories import create_group, create_namespace, create_tenant, running_app

INTERVAL_S = 0.2  # the report interval: the watcher's backoff doubles from twice this
DOWN_S = 3.0


class Polls:
    """Every long poll on changes any client makes: when each started, ended and how."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.ended: list[tuple[float, bool]] = []  # (when, whether it was answered)

    def count(self, start: float, end: float) -> int:
        """Polls that started between `start` and `end`."""
        return sum(start <= at < end for at in self.started)

    def failed(self, start: float, end: float) -> int:
        return sum(start <= at < end and not answered for at, answered in self.ended)


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> Polls:
    seen = Polls()
    changes = AdminClient.changes

    def counted(self: AdminClient, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        seen.started.append(time.monotonic())
        try:
            answer = changes(self, *args, **kwargs)
        except AdminServerError:
            seen.ended.append((time.monotonic(), False))
            raise
        seen.ended.append((time.monotonic(), True))
        return answer

    monkeypatch.setattr(AdminClient, "changes", counted)
    return seen


class Pushed(Reporter):
    """A reporter that notes when the watcher tells it of an admin change."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pushes: list[float] = []

    def changed(self, *, admin: bool) -> None:
        if admin:
            self.pushes.append(time.monotonic())
        super().changed(admin=admin)


def wait_until(condition: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.02)
    return time.monotonic() - start


def test_the_watcher_backs_off_while_the_server_is_down_and_watches_again(
    tmp_path: Path, polls: Polls
) -> None:
    database_url = f"sqlite:///{tmp_path / 'rg.db'}"
    upgrade_schema(database_url)
    secret_key = generate_secret_key()
    settings = make_settings(database_url, secret_key, report_interval_seconds=INTERVAL_S)
    port = free_port()  # the server's, before it stops and after it is back
    superuser = {
        "Authorization": f"Bearer {create_token(subject=SUPERUSER, secret_key=secret_key)}"
    }
    url = f"http://127.0.0.1:{port}"
    token = create_token(subject="job", secret_key=secret_key)
    reporter = Pushed(AdminClient(url, token=token), [NamespaceQuota("t", "ns")])
    try:
        watch_through_a_restart(settings, port, superuser, reporter, polls)
    finally:
        reporter.close()


def watch_through_a_restart(
    settings: Settings, port: int, superuser: dict[str, str], reporter: Pushed, polls: Polls
) -> None:
    with running_app(settings) as app, serve(app, port=port, graceful_s=0) as url:
        with httpx.Client(base_url=url, headers=superuser) as admin:
            create_group(admin, "rg", publishRateInMsgs=1000)
            create_tenant(admin, "t")
            create_namespace(admin, "t/ns", group="rg", producers=["job"])
        reporter.run_once()
        reporter.start()
        wait_until(lambda: len(polls.started) >= 2, 10, "a poll that waits for a change")
        time.sleep(0.3)  # the server stops in the middle of it
        down = time.monotonic()
    time.sleep(DOWN_S)
    # Backoffs of 0.4, 0.8, 1.6 s: the poll the server cut and 3 more. A watcher that spins
    # makes thousands in this time.
    assert 2 <= polls.failed(down, down + DOWN_S) <= 6, polls.ended
    with running_app(settings) as app, serve(app, port=port, graceful_s=0) as url:
        up = time.monotonic()
        # Its next try, within the backoff then (3.2 s) or the one after, waits for a change.
        wait_until(lambda: polls.count(up, time.monotonic()) >= 1, 10, "a poll")
        time.sleep(0.3)
        assert polls.failed(up, time.monotonic()) == 0
        with httpx.Client(base_url=url, headers=superuser) as admin:
            cut = time.monotonic()
            admin.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 500})
        took = wait_until(lambda: any(at >= cut for at in reporter.pushes), 5, "the cut")
        assert took < 1.0, f"the watcher told of the cut {took:.2f} s after it was made"
