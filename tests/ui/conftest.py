"""Browser fixtures: Debian's Chromium driven by Playwright, against a live server.

The dashboard runs on one backend (SQLite) here: what it shows comes from the admin API,
whose tests run on both. Every page a test opens records the requests it makes and the
errors it logs, and leaves a screenshot in ``test-artifacts/ui/``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from tests.conftest import SUPERUSER, empty_tables
from tests.preflight import CHROMIUM
from tests.ui.harness import DashboardServer, Workload, dashboard_server

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
# Playwright's actions and waiting assertions give up after this long.
TIMEOUT_MS = 15_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # Debian's build, never a downloaded one.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def dashboard_session_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashboardServer]:
    with dashboard_server(tmp_path_factory.mktemp("dashboard")) as server:
        yield server


@pytest.fixture
def server(dashboard_session_server: DashboardServer) -> DashboardServer:
    """The live server, on empty tables."""
    empty_tables(dashboard_session_server.engine)
    return dashboard_session_server


@pytest.fixture
def admin(server: DashboardServer) -> Iterator[httpx.Client]:
    """A client of the live server's admin API as the superuser."""
    with server.api() as client:
        yield client


@dataclass
class Recording:
    """What a page asked the network for and what it logged as errors."""

    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def urls(self) -> list[str]:
        return [request.url for request in self.requests]


@pytest.fixture
def recording() -> Recording:
    return Recording()


@pytest.fixture
def page(
    browser: Browser, server: DashboardServer, recording: Recording, request: pytest.FixtureRequest
) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=server.url)
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    opened.on("request", lambda sent: recording.requests.append(sent))
    opened.on("pageerror", lambda error: recording.errors.append(f"page error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            recording.errors.append(message.text)

    opened.on("console", on_console)
    try:
        yield opened
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        opened.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        context.close()


@pytest.fixture
def sign_in(page: Page, server: DashboardServer) -> Callable[[str], None]:
    """Open the dashboard and sign in with a token for a role, through the form."""

    def enter(role: str = SUPERUSER) -> None:
        page.goto("/ui/")
        page.get_by_label("Token").fill(server.token(role))
        page.get_by_role("button", name="Sign in").click()
        page.locator("#role").get_by_text(role, exact=True).wait_for()

    return enter


@pytest.fixture
def workload(server: DashboardServer) -> Iterator[Workload]:
    """Workers reporting as role ``job`` (grant it ``produce`` on their namespaces)."""
    with Workload(server.url, server.token("job")) as running:
        yield running
