"""A client that goes away mid-request (a worker killed while it sends its report, a proxy
that gives up) is nobody's error: counted under nginx's 499, never a 500 or a traceback."""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from tests.app.test_metrics import scrape
from tests.factories import create_namespace, create_tenant

Auth = Callable[[str], dict[str, str]]
REPORTS = "/quota/v1/reporters/{reporterId}/reports"


def send_and_vanish(url: str, head: str, body: bytes) -> None:
    """Send a request's head and part of its body on a real socket, then close it."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname or "", where.port or 80)) as connection:
        connection.sendall(head.encode() + body)
        time.sleep(0.1)  # the server has started on the body before the client goes


def head(method: str, path: str, token: dict[str, str], framing: str) -> str:
    lines = [f"{method} {path} HTTP/1.1", "Host: rg", "Content-Type: application/json", framing]
    lines += [f"{name}: {value}" for name, value in token.items()]
    return "\r\n".join(lines) + "\r\n\r\n"


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 1000", b'{"sentAtMs": 1'),  # the rest never comes
        ("Transfer-Encoding: chunked", b'5\r\n{"sen\r\nzz\r\n'),  # broken framing
    ],
    ids=["short", "bad-chunks"],
)
@pytest.mark.parametrize(
    ("method", "path", "route", "role"),
    [
        ("POST", "/quota/v1/reporters/r1/reports", REPORTS, "job"),
        ("PUT", "/admin/v2/resourcegroups/rg", "/admin/v2/resourcegroups/{rg}", "admin"),
    ],
    ids=["report", "admin-put"],
)
def test_a_client_gone_mid_body_is_a_499_and_no_traceback(
    live_url: str,
    client: TestClient,
    auth: Auth,
    caplog: pytest.LogCaptureFixture,
    framing: str,
    body: bytes,
    method: str,
    path: str,
    route: str,
    role: str,
) -> None:
    create_tenant(client, "t")
    create_namespace(client, "t/ns", producers=["job"])
    caplog.set_level(logging.INFO)

    def counted() -> Counter[str]:
        """Requests of the route so far, by status (the app's metrics outlive a test)."""
        labels = {("method", method), ("route", route)}
        return Counter(
            {
                dict(key)["status"]: int(count)
                for (name, key), count in scrape(client).items()
                if name == "rg_http_requests_total" and labels <= key
            }
        )

    before = counted()
    for _ in range(3):
        send_and_vanish(live_url, head(method, path, auth(role), framing), body)
    deadline = time.monotonic() + 5
    while (counted() - before)["499"] < 3:
        assert time.monotonic() < deadline, f"lost requests not counted: {counted() - before}"
        time.sleep(0.05)
    assert counted() - before == Counter({"499": 3})
    assert "Traceback" not in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
