"""Real ``rgadmin serve`` processes on a test database, for tests across processes."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from benchmarks._servers import Server, clean_env, free_port, serve_rgadmin, stop
from tests.conftest import SUPERUSER

__all__ = ["free_port", "rgadmin_servers", "wait_healthy"]


@contextmanager
def rgadmin_servers(
    database_url: str, secret_key: bytes, directory: Path, count: int = 2
) -> Iterator[list[str]]:
    """``count`` server processes of one worker each; yields their base URLs."""
    env = {
        **clean_env(),
        "RG_DATABASE_URL": database_url,
        "RG_AUTH_TOKEN_SECRET_KEY": "data:;base64," + base64.b64encode(secret_key).decode(),
        "RG_SUPERUSER_ROLES": SUPERUSER,
    }
    started: list[Server] = []
    try:
        for number in range(count):
            started.append(serve_rgadmin(directory, f"server{number}", env))
        yield [f"http://127.0.0.1:{server.port}" for server in started]
    finally:
        for server in started:
            stop(server)


def wait_healthy(
    url: str, server: subprocess.Popen[str] | None = None, timeout_s: float = 30
) -> object:
    """The body of the first 200 from ``{url}/health``; fails if ``server`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            pytest.fail(f"the server exited: {server.communicate()[1]}")
        try:
            response = httpx.get(f"{url}/health")
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        if response.status_code == 200:
            return response.json()
        time.sleep(0.1)
    pytest.fail(f"{url}/health never answered 200")
