"""The README's server command for real, and a database that is down."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.auth import create_token
from tests.app.processes import free_port
from tests.conftest import make_settings
from tests.factories import running_app

RGADMIN = str(Path(sys.executable).with_name("rgadmin"))


@contextlib.contextmanager
def _serving(directory: Path, **settings: str) -> Iterator[str]:
    """``rgadmin serve`` in ``directory`` with no RG_ settings but ``settings``; its URL."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    port = free_port()
    process = subprocess.Popen(
        [RGADMIN, "serve", "--port", str(port), "--no-access-log"],
        cwd=directory,
        env={**env, **settings},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail("the server did not come up")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=15)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``rgadmin serve`` in an empty directory with no RG_ settings at all."""
    with _serving(tmp_path) as url:
        yield url, tmp_path


def test_first_run_is_secured_and_tells_how_to_get_a_token(served: tuple[str, Path]) -> None:
    url, directory = served
    assert (directory / "data" / "secret.key").stat().st_mode & 0o077 == 0
    assert httpx.get(f"{url}/admin/v2/resourcegroups").status_code == 401

    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    token = subprocess.run(
        [RGADMIN, "tokens", "create", "--subject", "admin"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    put = httpx.put(
        f"{url}/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 5}, headers=headers
    )
    assert put.status_code == 204
    got = httpx.get(f"{url}/admin/v2/resourcegroups/rg", headers=headers)
    assert got.json()["publishRateInMsgs"] == 5


def test_database_down_is_a_quick_503(secret_key: bytes) -> None:
    # Nothing listens on port 1: the connection is refused at once, as with a stopped server.
    with running_app(make_settings("postgresql://postgres@127.0.0.1:1/none", secret_key)) as app:
        client = TestClient(app, raise_server_exceptions=False)
        started = time.monotonic()
        assert client.get("/health").status_code == 503
        response = client.get("/admin/v2/resourcegroups", headers=bearer_for(secret_key))
        assert response.status_code == 503
        assert response.json() == {"reason": "Database unavailable"}
        assert time.monotonic() - started < 10


def bearer_for(secret_key: bytes) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(subject='admin', secret_key=secret_key)}"}


def _health(connection: socket.socket) -> bytes:
    """``GET /health`` on the connection; the head of its answer, read whole with its body."""
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: rg\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += _received(connection)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    assert length is not None, head
    while len(body) < int(length[1]):
        body += _received(connection)
    return head


def _received(connection: socket.socket) -> bytes:
    chunk = connection.recv(65536)
    assert chunk, "the server closed the connection"
    return chunk


def test_a_workers_connection_outlasts_its_lease(tmp_path: Path) -> None:
    """Kept open for a lease and the grace (2 + 2 x 0.5 s here), not uvicorn's 5 s: a steady
    worker's next report reaches the server process that remembers it."""
    settings = {
        "RG_AUTH_ENABLED": "false",
        "RG_REPORT_INTERVAL_SECONDS": "0.5",
        "RG_REPORT_LEASE_SECONDS": "2",
    }
    with _serving(tmp_path, **settings) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            assert _health(connection).startswith(b"HTTP/1.1 200")
            time.sleep(2.5)  # a lease, and a late report's half interval
            assert _health(connection).startswith(b"HTTP/1.1 200")
            time.sleep(3.5)  # past the lease and the grace, not yet uvicorn's default
            connection.settimeout(0.5)
            assert connection.recv(65536) == b""  # closed by the server, not still open
