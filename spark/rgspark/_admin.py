"""The few admin-server calls a worker makes, with errors mapped onto rgspark's tree.

An answer is checked before anything uses it: a body that is not the API's (not JSON, a
field missing, a rate that is NaN, negative or too small for a bucket to hold) raises
`UnexpectedResponseError` like any other answer the API does not define, so that a worker
treats it as it treats a server it cannot reach (the reporter's fail-static rule).
"""

from __future__ import annotations

import contextlib
import math
import socket
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import httpx

from ._exceptions import (
    AuthenticationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    ServerUnreachableError,
    UnexpectedResponseError,
)
from .wire import DIMENSIONS, ENFORCE, KEPT_HEADER, MODES, OBSERVE, UNLIMITED_ALLOCATION

__all__ = ["AdminClient", "NamespaceAnswer", "ReportAnswer", "ReportShed", "report_answer"]

#: The least allocation a worker holds: a millionth of a unit per second, the finest rate a
#: `TokenBucket` resolves. An answer granting less (other than -1, unlimited) is not used.
MIN_ALLOCATION = 1e-6

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
        if not isinstance(groups, Mapping):
            raise _not_the_api("the changes", f"groups is {groups!r}")
        return _whole(answer.get("generation"), "generation"), {
            str(group): _whole(wake, f"the wake of {group}") for group, wake in groups.items()
        }

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

    def release_job(self, job: str) -> None:
        """Free the shares of every reporter of the job (`rgspark.wire.job_of`) that this
        client's role owns, at once (``DELETE /quota/v1/jobs/{job}``); none left is fine."""
        self._call("DELETE", f"/quota/v1/jobs/{job}")

    def post_job_figures(self, job: str, body: dict[str, Any]) -> None:
        """Add what this process's tasks moved for the job to its figures on the server
        (``POST /quota/v1/jobs/{job}/figures``: `rgspark._server_stats`)."""
        self._call("POST", f"/quota/v1/jobs/{job}/figures", json=body)

    def job_figures(self, job: str, kind: str) -> dict[str, Any]:
        """The job's figures for `kind`, summed over its workers by the server."""
        return self._call("GET", f"/quota/v1/jobs/{job}/figures", params={"kind": kind})

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
        self.throttle_s = 0.0  # an answer's throttle time is for the call after it only
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
    message = f"{method} {path} answered {response.status_code}"
    if reason:
        message = f"{message}: {reason}"
    kept_s = _header_seconds(response, KEPT_HEADER)
    if kept_s is not None:
        raise ReportShed(message, status_code=response.status_code, reason=reason, kept_s=kept_s)
    error = _ERRORS.get(response.status_code, UnexpectedResponseError)
    raise error(message, status_code=response.status_code, reason=reason)


class ReportShed(UnexpectedResponseError):
    """The server, up but with more reports than it stores, answered the report without
    storing it (503), and said how long it still counts the reporter alive, holding its
    last allocations: `kept_s` after the report was sent (then the grace); 0: it no longer
    counts it (``X-Lease-Kept-Ms``)."""

    def __init__(self, message: str, *, status_code: int, reason: str | None, kept_s: float):
        super().__init__(message, status_code=status_code, reason=reason)
        self.kept_s = kept_s


def throttle_time_s(response: httpx.Response) -> float:
    """The answer's throttle time (``X-Throttle-Time-Ms``), in seconds."""
    return _header_seconds(response, "X-Throttle-Time-Ms") or 0.0


def _header_seconds(response: httpx.Response, header: str) -> float | None:
    """A header's milliseconds, in seconds (at least 0); None when absent or not a number."""
    try:
        seconds = float(response.headers[header]) / 1000
    except (KeyError, ValueError):
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


class NamespaceAnswer(NamedTuple):
    """One namespace's part of a report's answer, checked."""

    group: str | None
    """The namespace's effective group (None: no group limits it)."""
    allocations: dict[str, float]
    """The rate of each dimension (-1 unlimited)."""
    fallbacks: dict[str, float] | None
    """The fair share of each dimension, held past the fail-static bound (None: an older
    server, which sends none)."""
    observing: bool = False
    """Whether its group is in observe mode (``mode``; absent, from a server without modes:
    enforcing)."""


class ReportAnswer(NamedTuple):
    """A report's answer, checked (`report_answer`); times in seconds."""

    interval_s: float
    """When to report again."""
    period_s: float | None
    """The server's report interval (None: an older server, which does not say it)."""
    lease_s: float | None
    """How long the answer holds (None: an older server; a report interval then)."""
    confirm_falls: bool
    """Whether the server asks each report to say the rates its buckets enforce."""
    namespaces: dict[str, NamespaceAnswer]


def report_answer(answer: Mapping[str, Any], reported: Iterable[str]) -> ReportAnswer:
    """The answer to a report of the namespaces `reported`, checked: raises
    `UnexpectedResponseError`, naming what is wrong, for one a worker cannot use. Only
    ``leaseMs``, ``reportPeriodMs``, ``confirmFalls`` and ``fallbackAllocations`` may be
    missing: an older server sends none of them."""
    namespaces = answer.get("namespaces")
    if not isinstance(namespaces, Mapping):
        raise _not_the_api("a report", f"namespaces is {namespaces!r}")
    checked = {str(key): _namespace_answer(str(key), part) for key, part in namespaces.items()}
    for key in reported:
        if key not in checked:
            raise _not_the_api("a report", f"it does not answer for {key}")
    confirm = answer.get("confirmFalls", False)
    if not isinstance(confirm, bool):
        raise _not_the_api("a report", f"confirmFalls is {confirm!r}")
    return ReportAnswer(
        interval_s=_seconds(answer, "reportIntervalMs"),
        period_s=_seconds_if_sent(answer, "reportPeriodMs"),
        lease_s=_seconds_if_sent(answer, "leaseMs"),
        confirm_falls=confirm,
        namespaces=checked,
    )


def _namespace_answer(key: str, part: Any) -> NamespaceAnswer:
    if not isinstance(part, Mapping):
        raise _not_the_api("a report", f"the part of {key} is {part!r}")
    group = part.get("resourceGroup")
    if group is not None and not isinstance(group, str):
        raise _not_the_api("a report", f"the resourceGroup of {key} is {group!r}")
    allocations = _rates(key, part, "allocations")
    if allocations is None:
        raise _not_the_api("a report", f"it has no allocations for {key}")
    mode = part.get("mode", ENFORCE)
    if mode not in MODES:  # a worker must not guess whether to hold back
        raise _not_the_api("a report", f"the mode of {key} is {mode!r}")
    fallbacks = _rates(key, part, "fallbackAllocations")
    return NamespaceAnswer(group, allocations, fallbacks, mode == OBSERVE)


def _rates(key: str, part: Mapping[str, Any], name: str) -> dict[str, float] | None:
    """The rate of each dimension in the field `name`, None when it is missing."""
    rates = part.get(name)
    if rates is None:
        return None
    if not isinstance(rates, Mapping):
        raise _not_the_api("a report", f"the {name} of {key} are {rates!r}")
    checked = {}
    for dimension in DIMENSIONS:
        rate = _number(rates.get(dimension))
        if rate is None or not (rate == UNLIMITED_ALLOCATION or rate >= MIN_ALLOCATION):
            raise _not_the_api(
                "a report",
                f"{name}.{dimension} of {key} is {rates.get(dimension)!r}, not -1 (unlimited) "
                f"nor a finite rate of at least {MIN_ALLOCATION:g} per second",
            )
        checked[dimension] = rate
    return checked


def _seconds(answer: Mapping[str, Any], name: str) -> float:
    """The field `name`, a positive number of milliseconds, in seconds."""
    milliseconds = _number(answer.get(name))
    if milliseconds is None or milliseconds <= 0:
        raise _not_the_api("a report", f"{name} is {answer.get(name)!r}, not a positive number")
    return milliseconds / 1000


def _seconds_if_sent(answer: Mapping[str, Any], name: str) -> float | None:
    """`_seconds`, or None when the field is missing (an older server does not send it)."""
    return None if answer.get(name) is None else _seconds(answer, name)


def _number(value: Any) -> float | None:
    """`value` if it is a finite number (a JSON boolean is not one), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _whole(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _not_the_api("the changes", f"{name} is {value!r}, not a whole number")
    return value


def _not_the_api(what: str, problem: str) -> UnexpectedResponseError:
    return UnexpectedResponseError(
        f"The admin server's answer to {what} is not the API's: {problem}", status_code=200
    )
