"""Request limits: bodies over the limit (413, before parsing, while reading), bodies that are
not JSON (415), too many or too large headers (431), bodies that never finish (408), and a
body refused before it is read when the caller may not use the endpoint (403)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from starlette.types import Message

from app.auth import create_token, generate_secret_key
from app.config import MIB, Settings
from app.db import upgrade_schema
from app.state import state_of
from tests.app.processes import free_port
from tests.conftest import SUPERUSER, make_settings
from tests.factories import reason, running_app

Auth = Callable[[str], dict[str, str]]
TENANTS = "/admin/v2/tenants"
REPORT = "/quota/v1/reporters/r1/reports"
# Small limits, so that the tests send kilobytes rather than megabytes.
BODY_LIMIT = 2048
REPORT_LIMIT = 8192
EXAMPLE_PATH_PARAMETERS = {
    "tenant": "t",
    "namespace": "ns",
    "rg": "rg",
    "role": "bob",
    "reporterId": "r1",
    "jobId": "j1",
}


@pytest.fixture
def small(database_url: str, secret_key: bytes, engine: Engine) -> Iterator[FastAPI]:
    """The app with small body limits, on the shared (empty) database."""
    settings = make_settings(
        database_url, secret_key, max_body_bytes=BODY_LIMIT, max_report_body_bytes=REPORT_LIMIT
    )
    with running_app(settings) as app:
        yield app


@pytest.fixture
def small_client(small: FastAPI, auth: Auth) -> TestClient:
    return TestClient(small, headers=auth(SUPERUSER), raise_server_exceptions=False)


def body_operations(app: FastAPI) -> list[tuple[str, str]]:
    """(method, example path) of every operation that takes a body."""
    found = []
    for route in state_of(app).routes:
        if not isinstance(route, APIRoute):
            continue
        documented = (route.openapi_extra or {}).get("requestBody")
        if route.body_field is None and documented is None:
            continue
        path = re.sub(r"{(\w+)}", lambda m: EXAMPLE_PATH_PARAMETERS[m[1]], route.path)
        found.extend((method, path) for method in sorted(route.methods))
    return found


def padded(size: int) -> bytes:
    """A valid JSON object of exactly `size` bytes."""
    return b"{" + b" " * (size - 2) + b"}"


class TestContentType:
    def test_every_body_operation_is_found(self, app: FastAPI) -> None:
        operations = body_operations(app)
        assert ("POST", REPORT) in operations
        assert ("PUT", "/admin/v2/namespaces/t/ns") in operations
        assert ("PUT", f"{TENANTS}/t") in operations
        assert ("POST", "/admin/v2/namespaces/t/ns/permissions/bob") in operations

    @pytest.mark.parametrize(
        "content_type",
        [
            None,
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/xml",
            "json",
            "text/json",
            "a/b+json",
        ],
    )
    def test_every_body_operation_answers_415_to_a_body_that_is_not_json(
        self, client: TestClient, app: FastAPI, unchanged: Any, content_type: str | None
    ) -> None:
        headers = {} if content_type is None else {"Content-Type": content_type}
        with unchanged():
            for method, path in body_operations(app):
                response = client.request(method, path, content=b"{}", headers=headers)
                text = reason(response, 415)
                assert "Content-Type application/json" in text, (method, path)
                assert (content_type or "none was given") in text
                assert response.headers["connection"] == "close"

    @pytest.mark.parametrize(
        "content_type",
        [
            "application/json",
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
            "application/vnd.pulsar+json",
        ],
    )
    def test_json_media_types_are_read(self, client: TestClient, content_type: str) -> None:
        response = client.put(
            f"{TENANTS}/t",
            content=b'{"adminRoles": ["bob"]}',
            headers={"Content-Type": content_type},
        )
        assert response.status_code == 204, response.text

    def test_no_body_needs_no_content_type(self, client: TestClient) -> None:
        client.put(f"{TENANTS}/t", json={})
        assert client.put("/admin/v2/namespaces/t/ns").status_code == 204
        assert reason(client.put(f"{TENANTS}/u"), 400) == "Request body is required"

    def test_an_operation_without_a_body_ignores_its_content_type(self, client: TestClient) -> None:
        client.put("/admin/v2/resourcegroups/rg", json={})
        client.put(f"{TENANTS}/t", json={})
        response = client.post(
            f"{TENANTS}/t/resourcegroup/rg", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert response.status_code == 204


class TestBodySize:
    def test_content_length_over_the_limit_is_413_before_reading(
        self, small_client: TestClient, unchanged: Any
    ) -> None:
        with unchanged():
            response = small_client.put(
                f"{TENANTS}/t",
                content=padded(BODY_LIMIT + 1),
                headers={"Content-Type": "application/json"},
            )
        assert reason(response, 413) == f"Request body too large: at most {BODY_LIMIT} bytes"
        assert response.headers["connection"] == "close"

    def test_a_body_at_the_limit_is_read(self, small_client: TestClient) -> None:
        body = b'{"adminRoles": ["bob"]' + b" " * BODY_LIMIT
        body = body[: BODY_LIMIT - 1] + b"}"
        assert len(body) == BODY_LIMIT
        response = small_client.put(
            f"{TENANTS}/t", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 204, response.text

    def test_a_chunked_body_is_counted_while_it_is_read(
        self, small_client: TestClient, unchanged: Any
    ) -> None:
        def chunks() -> Iterator[bytes]:
            yield b"{"
            for _ in range(BODY_LIMIT // 100 + 1):
                yield b" " * 100
            yield b"}"

        with unchanged():
            response = small_client.put(
                f"{TENANTS}/t", content=chunks(), headers={"Content-Type": "application/json"}
            )
        assert "content-length" not in response.request.headers
        assert reason(response, 413) == f"Request body too large: at most {BODY_LIMIT} bytes"

    def test_reports_have_their_own_limit(self, small_client: TestClient) -> None:
        json = {"Content-Type": "application/json"}
        between = small_client.post(REPORT, content=padded(REPORT_LIMIT), headers=json)
        assert "sentAtMs" in reason(between, 400)  # read and parsed: a field is missing
        over = small_client.post(REPORT, content=padded(REPORT_LIMIT + 1), headers=json)
        assert reason(over, 413) == f"Request body too large: at most {REPORT_LIMIT} bytes"
        admin = small_client.put(f"{TENANTS}/t", content=padded(REPORT_LIMIT), headers=json)
        assert admin.status_code == 413

    def test_the_default_report_limit_holds_a_maximal_report_with_margin(self) -> None:
        size = len(maximal_report())
        assert Settings().max_report_body_bytes >= 1.5 * size
        assert size > Settings().max_body_bytes  # why reports have a limit of their own


def maximal_report() -> bytes:
    """The longest compact report the schema admits: 10,000 namespaces with 255-character
    names, every dimension at its longest figures."""
    from app.quota.schemas import (
        MAX_NAMESPACES_PER_REPORT,
        MAX_USED,
        UsageReport,
    )
    from rgspark.wire import DIMENSIONS

    longest_demand = "2.2250738585072014e-308"  # 23 characters, and within [0, 1e18]
    dimension = f'{{"used":{MAX_USED},"demand":{longest_demand}}}'
    usage = "{" + ",".join(f'"{name}":{dimension}' for name in DIMENSIONS) + "}"
    entries = ",".join(
        f'"{"t" * 250}{i:05d}/{"n" * 250}{i:05d}":{usage}' for i in range(MAX_NAMESPACES_PER_REPORT)
    )
    body = f'{{"sentAtMs":{2**53},"intervalMs":86400000,"namespaces":{{{entries}}}}}'.encode()
    assert len(UsageReport.model_validate_json(body).namespaces) == MAX_NAMESPACES_PER_REPORT
    return body


class TestHeaders:
    def test_too_many_headers_is_431(self, client: TestClient) -> None:
        headers = {f"X-Filler-{i}": "x" for i in range(Settings().max_request_headers)}
        response = client.get(TENANTS, headers=headers)
        assert "Too many request headers" in reason(response, 431)

    def test_too_large_headers_is_431(self, client: TestClient) -> None:
        response = client.get(TENANTS, headers={"X-Filler": "x" * Settings().max_header_bytes})
        assert "Request headers too large" in reason(response, 431)

    def test_usual_headers_pass(self, client: TestClient) -> None:
        headers = {f"X-Filler-{i}": "x" * 100 for i in range(50)}
        assert client.get(TENANTS, headers=headers).status_code == 200


class TestRefusedBeforeReading:
    """Driven over ASGI with a `receive` that counts its calls: the app's own transport."""

    def run(self, app: FastAPI, method: str, path: str, role: str, **headers: str) -> Any:
        token = create_token(subject=role, secret_key=self.secret_key)
        raw = [(b"authorization", f"Bearer {token}".encode())]
        raw += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
        reads = 0
        sent: list[Message] = []

        async def receive() -> Message:
            nonlocal reads
            reads += 1
            return {"type": "http.request", "body": b"{" + b" " * 1000, "more_body": True}

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": raw,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        asyncio.run(app(scope, receive, send))
        return sent[0]["status"], reads

    @pytest.fixture(autouse=True)
    def _key(self, secret_key: bytes) -> None:
        self.secret_key = secret_key

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("PUT", "/admin/v2/resourcegroups/rg"),
            ("PUT", "/admin/v2/resourcegroup/rg"),
            ("PUT", f"{TENANTS}/t"),
            ("POST", f"{TENANTS}/t"),
            ("PUT", "/admin/v2/request-quotas/default"),
            ("PUT", "/admin/v2/request-quotas/roles/bob"),
        ],
    )
    def test_superuser_operations_refuse_others_unread(
        self, small: FastAPI, method: str, path: str
    ) -> None:
        chunked = self.run(
            small,
            method,
            path,
            "stranger",
            content_type="application/json",
            transfer_encoding="chunked",
        )
        assert chunked == (403, 0)
        announced = self.run(
            small,
            method,
            path,
            "stranger",
            content_type="application/json",
            content_length="99999999",
        )
        assert announced == (403, 0)

    def test_a_superuser_body_is_read_up_to_the_limit(self, small: FastAPI) -> None:
        status, reads = self.run(
            small,
            "PUT",
            "/admin/v2/resourcegroups/rg",
            SUPERUSER,
            content_type="application/json",
            transfer_encoding="chunked",
        )
        assert status == 413
        assert reads == BODY_LIMIT // 1001 + 1

    def test_other_bodies_are_read_no_further_than_the_limit(self, small: FastAPI) -> None:
        # Tenant admins may create namespaces: whether this role may is known from the database
        # only, after the body; it is read up to the limit and no further.
        status, reads = self.run(
            small,
            "PUT",
            "/admin/v2/namespaces/t/ns",
            "stranger",
            content_type="application/json",
            transfer_encoding="chunked",
        )
        assert (status, reads) == (413, BODY_LIMIT // 1001 + 1)
        assert self.run(
            small, "PUT", "/admin/v2/namespaces/t/ns", "stranger", content_length="9" * 9
        ) == (413, 0)
        status, reads = self.run(
            small,
            "POST",
            REPORT,
            "stranger",
            content_type="application/json",
            transfer_encoding="chunked",
        )
        assert (status, reads) == (413, REPORT_LIMIT // 1001 + 1)


# --- A real server process ------------------------------------------------------------------


class Server:
    def __init__(self, port: int, pid: int, key: bytes) -> None:
        self.port = port
        self.pid = pid
        self.key = key

    def token(self, role: str) -> str:
        return create_token(subject=role, secret_key=self.key)

    def peak_rss_mb(self) -> float:
        """The process's peak resident memory so far (VmHWM), in MiB."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        kib = int(re.search(r"VmHWM:\s+(\d+) kB", status)[1])  # type: ignore[index]
        return kib / 1024

    def request(self, head: str, body_bytes: int = 0, chunk: int = 256 * 1024) -> tuple[int, int]:
        """Send `head` (request line and headers), then up to `body_bytes` of chunked body
        while the server has not answered; the answer's status and the bytes sent."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(head.encode())
            frame = f"{chunk:x}\r\n".encode() + b" " * chunk + b"\r\n"
            sent = 0
            try:
                while sent < body_bytes and not select.select([sock], [], [], 0)[0]:
                    sock.sendall(frame)
                    sent += chunk
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed: its answer is read below
            answer = b""
            try:
                while b"\r\n" not in answer:
                    data = sock.recv(65536)
                    if not data:
                        break
                    answer += data
            except ConnectionResetError:
                pass
        status_line = answer.split(b"\r\n", 1)[0].decode()
        assert status_line.startswith("HTTP/1.1 "), answer
        return int(status_line.split()[1]), sent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The app under uvicorn in a process of its own, on SQLite, with the default limits
    (but a short body timeout)."""
    directory = tmp_path_factory.mktemp("limits")
    url = f"sqlite:///{directory / 'rg.db'}"
    upgrade_schema(url)
    key = generate_secret_key()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RG_")}
    env |= {
        "RG_DATABASE_URL": url,
        "RG_AUTH_TOKEN_SECRET_KEY": "data:;base64," + base64.b64encode(key).decode(),
        "RG_SUPERUSER_ROLES": SUPERUSER,
        "RG_BODY_TIMEOUT_SECONDS": "1",
    }
    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(port)),
            *("--log-level", "warning", "--no-access-log"),
        ],
        cwd=directory,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("the server did not come up")
            time.sleep(0.1)
        yield Server(port, process.pid, key)
    finally:
        process.terminate()
        process.wait(timeout=15)


def head(server: Server, method: str, path: str, role: str, **headers: str) -> str:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: test",
        f"Authorization: Bearer {server.token(role)}",
    ]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines) + "\r\n\r\n"


HUGE = 300 * MIB


class TestRealServer:
    def test_a_huge_body_is_never_held(self, server: Server) -> None:
        json = {"content_type": "application/json"}
        # Warm up: the first requests load what the process keeps.
        assert server.request(head(server, "GET", TENANTS, SUPERUSER))[0] == 200
        before = server.peak_rss_mb()
        cases = [
            # A superuser's body, streamed: cut at the limit.
            (("PUT", f"{TENANTS}/t", SUPERUSER), 413, 4 * MIB),
            # A role with no rights on a superusers' operation: refused unread.
            (("PUT", "/admin/v2/resourcegroups/rg", "stranger"), 403, 0),
            # A role whose rights need the database: read to the limit, no further.
            (("PUT", "/admin/v2/namespaces/t/ns", "stranger"), 413, 4 * MIB),
            # A report: its own, larger limit.
            (("POST", REPORT, "stranger"), 413, 16 * MIB),
        ]
        for (method, path, role), status, limit in cases:
            request = head(server, method, path, role, transfer_encoding="chunked", **json)
            answered, sent = server.request(request, HUGE)
            assert answered == status, path
            # What the client got into the socket before the answer: the limit, plus what
            # the kernel's buffers took in meanwhile; far from 300 MB.
            assert sent < limit + 32 * MIB, (path, sent)
        announced = head(server, "PUT", f"{TENANTS}/t", SUPERUSER, content_length=str(HUGE), **json)
        assert server.request(announced) == (413, 0)
        growth = server.peak_rss_mb() - before
        assert growth < 64, f"peak RSS grew by {growth:.0f} MiB"
        # The server still serves.
        assert server.request(head(server, "GET", TENANTS, SUPERUSER))[0] == 200

    def test_a_body_that_never_finishes_is_408(self, server: Server) -> None:
        request = head(
            server,
            "PUT",
            f"{TENANTS}/t",
            SUPERUSER,
            content_type="application/json",
            content_length="100",
        )
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(request.encode() + b'{"adminRoles"')
            answer = sock.recv(65536)
            waited = time.monotonic() - started
            # The rest of the answer, up to the close its Connection header announces.
            while data := sock.recv(65536):
                answer += data
        assert b"\r\nconnection: close\r\n" in answer.lower()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"Request body not received within 1 seconds" in answer
        assert 0.9 < waited < 5
