"""A real server through a real PostgreSQL outage logs a line when it starts and a line when it
ends, for each part that uses the database, never a traceback and never a line per request or
per second.

The outage is a TCP relay between the server and PostgreSQL that the test cuts (closing every
connection and refusing new ones) and restores: the shared PostgreSQL keeps running.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from app.auth import create_token
from app.db import upgrade_schema
from tests.app.processes import free_port
from tests.conftest import postgres_database

# The outage is a PostgreSQL server's, cut under the app by a relay.
pytestmark = pytest.mark.postgresql

RGADMIN = str(Path(sys.executable).with_name("rgadmin"))
SECRET = b"o" * 32
OUTAGE_S = 4.0


class Relay:
    """Forwards a local port to PostgreSQL until cut; restored on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and drop every open one, as a database that went away."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        if listener is not None:
            # shutdown() first: close() alone leaves a blocked accept() accepting.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def relay() -> Iterator[tuple[Relay, str]]:
    with postgres_database() as url:
        upgrade_schema(url)
        parsed = make_url(url)
        relay = Relay((parsed.host or "127.0.0.1", parsed.port or 5432))
        relay.start()
        try:
            relayed = parsed.set(host="127.0.0.1", port=relay.port)
            yield relay, relayed.render_as_string(hide_password=False)
        finally:
            relay.cut()


def test_an_outage_is_two_lines_of_log_per_kind(relay: tuple[Relay, str], tmp_path: Path) -> None:
    relay_, database_url = relay
    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    env["RG_DATABASE_URL"] = database_url
    env["RG_AUTH_TOKEN_SECRET_KEY"] = "data:;base64," + base64.b64encode(SECRET).decode()
    # Samples of the usage history every second: some fall in the outage, some after it.
    env["RG_USAGE_HISTORY_RESOLUTION_SECONDS"] = "1"
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [RGADMIN, "serve", "--port", str(port), "--no-access-log"],
            cwd=tmp_path,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    # A role that is not a superuser: each of its requests may reload the request quotas
    # (once a second), the reload that used to log a traceback each time.
    role = {"Authorization": f"Bearer {create_token(subject='job', secret_key=SECRET)}"}
    admin = {"Authorization": f"Bearer {create_token(subject='admin', secret_key=SECRET)}"}
    try:
        wait_for(url, 200)
        relay_.cut()
        statuses = set()
        deadline = time.monotonic() + OUTAGE_S
        with httpx.Client(base_url=url, timeout=10) as client:
            while time.monotonic() < deadline:
                statuses.add(client.get("/admin/v2/tenants", headers=role).status_code)
                statuses.add(client.get("/admin/v2/resourcegroups", headers=admin).status_code)
                # A group is read through the read cache, which reads the admin generation.
                statuses.add(client.get("/admin/v2/resourcegroups/g", headers=admin).status_code)
                statuses.add(client.get("/health").status_code)
                time.sleep(0.05)
            assert 503 in statuses
            relay_.start()
            wait_for(url, 200)
            time.sleep(1.2)  # past the quotas' refresh interval: the next request reloads them
            assert client.get("/admin/v2/tenants", headers=role).status_code != 503
            assert client.get("/admin/v2/resourcegroups", headers=admin).status_code == 200
            assert client.get("/admin/v2/resourcegroups/g", headers=admin).status_code == 404
            time.sleep(1.2)  # past the next sample of the usage history
    finally:
        server.terminate()
        server.wait(timeout=15)

    text = log.read_text()
    assert "Traceback" not in text
    lines = text.splitlines()

    def count(words: str) -> int:
        return sum(words in line for line in lines)

    assert count("could not reload request quotas") == 1, text
    assert count("request quotas reloaded again") == 1, text
    assert count("database unavailable") == 1, text
    assert count("database available again") == 1, text
    # Once a second the read cache tries the admin generation, and fails through the outage.
    assert count("read cache off") == 1, text
    assert count("read cache on again") == 1, text
    assert count("could not sample usage history") == 1, text
    assert count("usage history sampled again") == 1, text
    assert count("could not forget silent reporters") == 0, text  # the database's line says it


def wait_for(url: str, status: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/health").status_code == status:
                return
        time.sleep(0.1)
    pytest.fail(f"{url}/health never answered {status}")
