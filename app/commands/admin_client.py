"""The admin API over HTTP: calls, and every failure turned into one line for the user."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn
from urllib.parse import quote

import httpx
import typer

from app.commands.connection import (
    AUTH_PARAMS_FORMS,
    TOKEN_VARIABLE,
    CommandError,
    Connection,
    ConnectionOptions,
    resolve,
)

ADMIN_PREFIX = "/admin/v2"
# A refused connection fails at once; these bound a server that accepts and then hangs.
TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0


def admin_path(*segments: str) -> str:
    """``/admin/v2/a/b``, each segment escaped: roles may hold ``/``, ``?`` or ``#``."""
    return ADMIN_PREFIX + "".join("/" + _segment(segment) for segment in segments)


def _segment(value: str) -> str:
    quoted = quote(value, safe="")
    # "." and ".." are valid names, but a URL drops them as dot segments.
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


class AdminClient:
    """Calls to one server; every failure is raised as a one-line :class:`CommandError`."""

    def __init__(self, connection: Connection, http: httpx.Client) -> None:
        self.connection = connection
        self._http = http

    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        """The server's answer, whatever its status; only a failure to get one raises."""
        url = self.connection.url
        try:
            return self._http.request(method, path, json=body, params=params)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise CommandError(f"Cannot reach the server at {url}: {_one_line(exc)}") from exc
        except httpx.TimeoutException as exc:
            raise CommandError(
                f"The server at {url} did not answer within {TIMEOUT_SECONDS:g} s."
            ) from exc
        except httpx.HTTPError as exc:
            raise CommandError(f"Lost the connection to {url}: {_one_line(exc)}") from exc

    def read(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        """GET ``path`` and return its JSON body."""
        return self.body_of(self.send("GET", path, params=params))

    def body_of(self, response: httpx.Response) -> Any:
        """The JSON body of a successful answer; else raise the server's reason."""
        self.checked(response)
        try:
            return response.json()
        except ValueError:
            raise CommandError(
                f"The server at {self.connection.url} answered {response.request.url.path} with "
                "something other than JSON: is it a ResourceGroups server?"
            ) from None

    def write(self, method: str, path: str, body: Any = None) -> None:
        """PUT, POST or DELETE ``path``, with a JSON body when one is given."""
        self.checked(self.send(method, path, body=body))

    def checked(self, response: httpx.Response) -> httpx.Response:
        """``response`` if it succeeded, else raise the server's reason."""
        if response.is_success:
            return response
        raise CommandError(self.describe_failure(response))

    def describe_failure(self, response: httpx.Response) -> str:
        message = f"{reason_of(response)} (HTTP {response.status_code})"
        if response.status_code == 401:
            if self.connection.token is None:
                message += (
                    f"; no token was given: pass --auth-params {AUTH_PARAMS_FORMS}, "
                    f"or set {TOKEN_VARIABLE}"
                )
            else:
                message += f"; the token came from {self.connection.token_source}"
        return message


def reason_of(response: httpx.Response) -> str:
    """The reason of a Pulsar error body ``{"reason": ...}``, else the body or status text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    reason = body.get("reason") if isinstance(body, dict) else None
    if isinstance(reason, str):
        return reason
    text = " ".join(response.text.split())
    return text[:200] if text else response.reason_phrase


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def fail(message: str) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(1)


def connection_options(ctx: typer.Context) -> ConnectionOptions:
    """What the root command was given (nothing, when a sub-app is run on its own)."""
    options = ctx.find_object(ConnectionOptions)
    return options if options is not None else ConnectionOptions()


@contextmanager
def connect(ctx: typer.Context) -> Iterator[AdminClient]:
    """An :class:`AdminClient` for the command's server; a :class:`CommandError` raised in the
    block ends the command with its one line on stderr and exit status 1."""
    try:
        connection = resolve(connection_options(ctx))
        timeout = httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        headers = {"Authorization": f"Bearer {connection.token}"} if connection.token else {}
        with httpx.Client(base_url=connection.url, headers=headers, timeout=timeout) as http:
            yield AdminClient(connection, http)
    except httpx.InvalidURL as error:
        fail(f"Invalid admin URL: {error}")
    except CommandError as error:
        fail(str(error))
