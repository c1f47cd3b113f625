"""A lean HTTP/1.1 load generator: N keep-alive connections, one request in flight on each.

On a small machine the client must cost far less per request than the server it measures,
or the client sets the pace and every server looks alike. So there is no HTTP library in the
hot loop: each connection is an asyncio ``Protocol`` that writes one prebuilt request, reads
just the status code and ``Content-Length`` of the answer, and writes the next request as soon
as the body is complete. The time a response completes doubles as the start of the next
request, so each request costs one clock read. uvloop is used when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

_T = TypeVar("_T")

# Requests still unanswered this long after the measuring window are counted as timeouts.
_GRACE_SECONDS = 5.0
_CONTENT_LENGTH = b"\r\ncontent-length:"


@dataclass
class LoadResult:
    """One run: what completed inside the measuring window, and what went wrong at any time."""

    seconds: float
    expected_status: int = 200
    completed: int = 0
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    protocol_errors: int = 0
    connection_errors: int = 0
    timeouts: int = 0
    client_cpu_seconds: float = 0.0

    @property
    def failed(self) -> int:
        unexpected = sum(
            count for status, count in self.statuses.items() if status != self.expected_status
        )
        return unexpected + self.protocol_errors + self.connection_errors + self.timeouts

    @property
    def requests_per_second(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0


def build_get(host: str, port: int, path: str, headers: dict[str, str] | None = None) -> bytes:
    return build_request(host, port, "GET", path, headers)


def build_request(
    host: str,
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 when there are none)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values)) - 1))
    return sorted_values[rank]


class _Run:
    """State shared by the connections of one run."""

    def __init__(self, result: LoadResult) -> None:
        self.result = result
        self.deadline = float("inf")  # set when every connection is open
        self.idle = 0  # connections with nothing in flight after the deadline
        self.connections = 0
        self.all_idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_idle(self) -> None:
        self.idle += 1
        if self.idle == self.connections and not self.all_idle.done():
            self.all_idle.set_result(None)


class _Connection(asyncio.Protocol):
    def __init__(self, run: _Run, request: bytes) -> None:
        self.run = run
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.expected = -1  # total bytes of the response being read, once its head is in
        self.status = 0
        self.sent_at = 0.0
        self.in_flight = False
        self.finished = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's, so this is a cast, not a check.
        self.transport = cast(asyncio.Transport, transport)

    def start(self, now: float) -> None:
        self._send(now)

    def _send(self, now: float) -> None:
        assert self.transport is not None
        self.sent_at = now
        self.in_flight = True
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        if self.expected < 0:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                self.buffer = buffer
                return
            length = self._parse_head(buffer, head_end)
            if length < 0:
                self._fail_protocol()
                return
            self.expected = head_end + 4 + length
        if len(buffer) < self.expected:
            self.buffer = buffer
            return
        # One request in flight per connection, so a complete response leaves nothing behind.
        if len(buffer) > self.expected:
            self._fail_protocol()
            return
        self.buffer = b""
        self.expected = -1
        self._complete(time.perf_counter())

    def _parse_head(self, buffer: bytes, head_end: int) -> int:
        """The status code into ``self.status``, and the body length (-1 when unreadable)."""
        if not buffer.startswith(b"HTTP/1.1 "):
            return -1
        try:
            self.status = int(buffer[9:12])
            head = buffer[:head_end].lower()
            start = head.find(_CONTENT_LENGTH)
            if start < 0:
                # No body, and so no length, on a 204 or a 304.
                return 0 if self.status in (204, 304) else -1
            start += len(_CONTENT_LENGTH)
            end = head.find(b"\r\n", start)
            return int(head[start:] if end < 0 else head[start:end])
        except ValueError:
            return -1

    def _complete(self, now: float) -> None:
        run = self.run
        self.in_flight = False
        if now <= run.deadline:
            result = run.result
            result.completed += 1
            result.latencies.append(now - self.sent_at)
            result.statuses[self.status] = result.statuses.get(self.status, 0) + 1
            self._send(now)
        else:
            self._finish()

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.run.connection_idle()

    def _fail_protocol(self) -> None:
        self.run.result.protocol_errors += 1
        self.in_flight = False
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_flight:
            self.run.result.connection_errors += 1
            self.in_flight = False
        self._finish()

    def abandon(self) -> None:
        """Called after the grace period: whatever is still in flight timed out."""
        if self.in_flight:
            self.run.result.timeouts += 1
            self.in_flight = False
        if self.transport is not None:
            self.transport.abort()
        self._finish()


async def _load(
    host: str,
    port: int,
    requests: Sequence[bytes],
    concurrency: int,
    seconds: float,
    expected_status: int,
) -> LoadResult:
    loop = asyncio.get_running_loop()
    result = LoadResult(seconds=seconds, expected_status=expected_status)
    run = _Run(result)
    # Connecting is not measured: every connection is open before the clock starts.
    connections: list[_Connection] = []
    for index in range(concurrency):
        connection = _Connection(run, requests[index % len(requests)])
        await loop.create_connection(functools.partial(_same, connection), host, port)
        connections.append(connection)
    run.connections = len(connections)
    cpu_start = time.process_time()
    start = time.perf_counter()
    run.deadline = start + seconds
    for connection in connections:
        connection.start(start)
    # Connections stop on their first response after the deadline; the wait ends when all have.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(run.all_idle), seconds + _GRACE_SECONDS)
    result.client_cpu_seconds = time.process_time() - cpu_start
    for connection in connections:
        connection.abandon()
    result.latencies.sort()
    return result


def _same(connection: _Connection) -> _Connection:
    return connection


def _run_loop(main: Callable[[], Awaitable[_T]]) -> _T:
    async def wrapper() -> _T:
        return await main()

    try:
        import uvloop
    except ImportError:
        return asyncio.run(wrapper())
    return uvloop.run(wrapper())


def event_loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run_load(
    host: str,
    port: int,
    request: bytes | Sequence[bytes],
    *,
    concurrency: int,
    seconds: float,
    expected_status: int = 200,
) -> LoadResult:
    """Drive ``concurrency`` keep-alive connections with ``request`` for ``seconds``; given
    several requests, connection ``i`` sends the ``i``-th (round robin). Any answer but
    ``expected_status`` counts as failed."""
    requests = [request] if isinstance(request, bytes) else list(request)
    return _run_loop(lambda: _load(host, port, requests, concurrency, seconds, expected_status))
