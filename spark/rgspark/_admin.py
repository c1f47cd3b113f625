"""The few admin-server calls a worker makes, with errors mapped onto rgspark's tree."""

from __future__ import annotations

import contextlib
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


class AdminClient:
    """A thin client of ``/quota/v1``; `transport` lets tests plug in ``httpx.MockTransport``."""

    __slots__ = ("_http", "throttle_s")

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        #: The throttle time of the last answer (``X-Throttle-Time-Ms``), in seconds: the
        #: server's request quota asks the caller to wait that long before calling again.
        self.throttle_s = 0.0

    def policy(self, tenant: str, namespace: str) -> dict[str, Any]:
        """The namespace's effective group and limits (``GET .../policy``)."""
        return self._call("GET", f"/quota/v1/namespaces/{tenant}/{namespace}/policy")

    def report(self, reporter_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send a usage report; the answer holds the allocations."""
        return self._call("POST", f"/quota/v1/reporters/{reporter_id}/reports", json=body)

    def release(self, reporter_id: str) -> None:
        """Free the reporter's shares; a reporter the server no longer knows is fine."""
        with contextlib.suppress(NamespaceNotFoundError):
            self._call("DELETE", f"/quota/v1/reporters/{reporter_id}")

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, json=json)
        except httpx.TransportError as exc:
            raise ServerUnreachableError(
                f"The admin server at {self._http.base_url} did not answer: {exc}"
            ) from exc
        self.throttle_s = _throttle_s(response)
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


def _throttle_s(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("x-throttle-time-ms", 0)) / 1000)
    except ValueError:
        return 0.0
