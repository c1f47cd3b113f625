"""The exceptions rgspark raises.

Every error rgspark raises on purpose derives from `RGSparkError`, so one ``except`` clause
catches them all; the subclasses say what went wrong and what to do about it::

    RGSparkError
    ├── ConfigurationError          options that cannot work (also a ValueError)
    ├── AdminServerError            talking to the admin server failed
    │   ├── ServerUnreachableError      no answer: refused, unresolvable or timed out
    │   ├── AuthenticationError         401: no token, or a token the server rejects
    │   ├── PermissionDeniedError       403: a valid token without the right
    │   ├── NamespaceNotFoundError      404: the tenant or namespace does not exist
    │   └── UnexpectedResponseError     any other status, or a body that is not the API's
    ├── PolicyUnavailableError      enforcement needs a policy and none was ever fetched
    ├── SlowDown                    raised by a job's own `send`: the destination is overloaded
    └── PushbackNotRetriedError     a destination pushed back where a retry could send twice

Bad arguments to the limiter (`TokenBucket`, `Limiter`) are programming errors, not runtime
conditions, so they raise the built-in `ValueError` and `TypeError` instead.
"""

from __future__ import annotations

__all__ = [
    "AdminServerError",
    "AuthenticationError",
    "ConfigurationError",
    "FiguresNotCountedError",
    "NamespaceNotFoundError",
    "PermissionDeniedError",
    "PolicyUnavailableError",
    "PushbackNotRetriedError",
    "RGSparkError",
    "ServerUnreachableError",
    "SlowDown",
    "UnexpectedResponseError",
]


class RGSparkError(Exception):
    """Base class of every error rgspark raises on purpose."""


class ConfigurationError(RGSparkError, ValueError):
    """The options given to rgspark cannot work: a malformed URL, an unknown kind, and so on.

    Also a `ValueError`, so code that validates its own inputs with ``except ValueError``
    keeps working.
    """


class AdminServerError(RGSparkError):
    """Talking to the admin server failed.

    `status_code` is the HTTP status when the server answered, and `reason` the ``reason``
    field of its Pulsar-style error body when it sent one.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason


class ServerUnreachableError(AdminServerError):
    """The admin server did not answer: the connection was refused or timed out, or the
    host name does not resolve."""


class AuthenticationError(AdminServerError):
    """The server answered 401: the request had no token, or one it does not accept
    (malformed, wrongly signed or expired)."""


class PermissionDeniedError(AdminServerError):
    """The server answered 403: the token is valid, but its role may not do this."""


class NamespaceNotFoundError(AdminServerError):
    """The server answered 404: the tenant or namespace does not exist."""


class UnexpectedResponseError(AdminServerError):
    """The server answered with a status or a body that the admin API does not define."""


class PolicyUnavailableError(RGSparkError):
    """Enforcement needs the group's policy, none has ever been fetched, and the client was
    configured to fail rather than run unlimited in that case."""


class FiguresNotCountedError(RGSparkError):
    """Figures were read from a `ThrottleStats` made without a SparkContext, in which nothing
    counts: the helpers' own, ``client.stats[kind]``, count on classic and Spark Connect
    sessions alike."""


class SlowDown(RGSparkError):
    """Raised by the `send` given to `rgspark.throttled_sink` (or by a function wrapped with
    `rgspark.throttled`) when the destination is overloaded and the rows it was given were
    not sent: rgspark sends the same rows again after `after_s` seconds (None: a backoff of
    its own), and lowers the worker's rate below its allocation until sends succeed again.

    An ``httpx.HTTPStatusError`` or ``requests.HTTPError`` whose response has status 429 or
    503 means the same, with the response's ``Retry-After`` as `after_s`.
    """

    def __init__(self, after_s: float | None = None, message: str | None = None) -> None:
        if after_s is not None:
            if isinstance(after_s, bool) or not isinstance(after_s, (int, float)):
                raise TypeError(f"after_s must be a number of seconds or None, not {after_s!r}")
            if not 0 <= after_s < float("inf"):
                raise ValueError(f"after_s must be a finite number >= 0, not {after_s!r}")
        super().__init__(message or _slow_down_message(after_s))
        self.after_s = None if after_s is None else float(after_s)

    def __reduce__(self) -> tuple[type[SlowDown], tuple[float | None, str]]:
        # Raised in a Python worker and pickled across processes: keep `after_s`.
        return (type(self), (self.after_s, str(self)))


def _slow_down_message(after_s: float | None) -> str:
    if after_s is None:
        return "The destination asks to slow down"
    return f"The destination asks to slow down and retry after {after_s:g} s"


class PushbackNotRetriedError(RGSparkError):
    """A function wrapped with `rgspark.throttled` pushed back (`SlowDown`, an HTTP 429 or
    503) where rgspark cannot feed it the same rows again without sending some twice: a
    function given an iterator of rows, which it may have gathered before sending, or one
    that pushed back after it had taken every item. The pushback is its ``__cause__``; send
    through `rgspark.throttled_sink` instead, which retries the very rows pushed back."""
