"""The few admin-server calls a worker makes, with errors mapped onto rgspark's tree."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from typing import Any

import httpx

from ._exceptions import (
    AuthenticationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    ServerUnreachableError,
    UnexpectedResponseError,
)

__all__ = ["AdminClient"]

_ERRORS = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NamespaceNotFoundError,
}


KEEPALIVE_S = 60.0
"""How long an idle connection is kept: beyond a steady worker's lease (8 s by default) and
its grace, which the server keeps it open for, so that each report reaches the server process
that answered the last one and remembers the worker (a new connection may reach another)."""


class AdminClient:
    """A thin client of ``/quota/v1``; `transport` lets tests plug in ``httpx.MockTransport``."""

    __slots__ = ("_http", "_socket", "throttle_s")

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        keep_alive: bool = True,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            transport=transport,
            # Without: a connection per call, so that `_trace` knows the socket in flight.
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S)
            if keep_alive
            else httpx.Limits(max_keepalive_connections=0),
        )
        self._socket: socket.socket | None = None  # of the last connection opened
        #: The throttle time of the last answer (``X-Throttle-Time-Ms``), in seconds: the
        #: server's request quota asks the caller to wait that long before calling again.
        self.throttle_s = 0.0

    def policy(self, tenant: str, namespace: str) -> dict[str, Any]:
        """The namespace's effective group and limits (``GET .../policy``)."""
        return self._call("GET", f"/quota/v1/namespaces/{tenant}/{namespace}/policy")

    def report(self, reporter_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send a usage report; the answer holds the allocations."""
        return self._call("POST", f"/quota/v1/reporters/{reporter_id}/reports", json=body)

    def changes(
        self, after: int | None, wakes: Mapping[str, int | None], wait_s: float
    ) -> tuple[int, dict[str, int]]:
        """The admin generation and the groups' wakes once the generation is not `after` or
        a wake is not the one given (None: not seen yet), or after `wait_s` (a long poll:
        ``GET /quota/v1/changes``)."""
        params: dict[str, Any] = {"waitMs": round(wait_s * 1000)}
        if after is not None:
            params["after"] = after
        if wakes:
            params["group"] = [f"{'' if w is None else w}:{g}" for g, w in wakes.items()]
        timeout = self._http.timeout.read
        answer = self._call(
            "GET",
            "/quota/v1/changes",
            params=params,
            timeout=wait_s + (timeout if timeout is not None else 10.0),
            extensions={"trace": self._trace},
        )
        groups = answer.get("groups") or {}
        return int(answer["generation"]), {str(g): int(w) for g, w in groups.items()}

    def watcher(self) -> AdminClient:
        """Another client of the same server with the same token, for a thread that holds
        `changes`: its answers' throttle times are its own, and `abort` ends its call."""
        twin = AdminClient(
            str(self._http.base_url), timeout=self._http.timeout.read or 10.0, keep_alive=False
        )
        twin._http.headers = self._http.headers
        return twin

    def abort(self) -> None:
        """End the call in flight, from another thread: closing the client does not (a
        socket closed while another thread reads it stays open until the read returns)."""
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self._socket = info["return_value"].get_extra_info("socket")

    def release(self, reporter_id: str) -> None:
        """Free the reporter's shares; a reporter the server no longer knows is fine."""
        with contextlib.suppress(NamespaceNotFoundError):
            self._call("DELETE", f"/quota/v1/reporters/{reporter_id}")

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        try:
            response = self._http.request(
                method,
                path,
                json=json,
                params=params,
                timeout=timeout if timeout is not None else self._http.timeout,
                extensions=extensions,
            )
        except httpx.TransportError as exc:
            raise ServerUnreachableError(
                f"The admin server at {self._http.base_url} did not answer: {exc}"
            ) from exc
        self.throttle_s = throttle_time_s(response)
        return answer_of(response, method, path)


def answer_of(response: httpx.Response, method: str, path: str) -> dict[str, Any]:
    """The JSON object of a successful answer (empty for a 204); any other raises the
    `AdminServerError` that its status says. Shared with callers that make the round trip
    themselves (the join-storm benchmark's event loop)."""
    if response.status_code == 204:
        return {}
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.is_success and isinstance(payload, dict):
        return payload
    reason = payload.get("reason") if isinstance(payload, dict) else None
    error = _ERRORS.get(response.status_code, UnexpectedResponseError)
    message = f"{method} {path} answered {response.status_code}"
    raise error(
        f"{message}: {reason}" if reason else message,
        status_code=response.status_code,
        reason=reason,
    )


def throttle_time_s(response: httpx.Response) -> float:
    """The answer's throttle time (``X-Throttle-Time-Ms``), in seconds."""
    try:
        return max(0.0, float(response.headers.get("x-throttle-time-ms", 0)) / 1000)
    except ValueError:
        return 0.0
