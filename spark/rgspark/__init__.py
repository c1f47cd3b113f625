"""rgspark: Pulsar-style ResourceGroup rate limits, enforced inside PySpark jobs.

A job names its tenant and namespace with a `ResourceGroupClient`; `throttle(df, client,
kind)` holds a DataFrame's flow to the namespace's group. Every worker process enforces its
share of the group's rate with an in-process token bucket (Apache Pulsar's PIP-322), reports
its usage and receives its fair share (PIP-82). Errors are described in `rgspark._exceptions`;
the names and figures that reports and answers share with the server are in `rgspark.wire`.
"""

from __future__ import annotations

from ._bucket import TokenBucket
from ._client import ResourceGroupClient
from ._exceptions import (
    AdminServerError,
    AuthenticationError,
    ConfigurationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    PolicyUnavailableError,
    RGSparkError,
    ServerUnreachableError,
    UnexpectedResponseError,
)
from ._limiter import Charges, Limiter
from ._reader import ThrottledReader
from ._spark import throttle, throttled_sink
from ._stats import ActionStats, ThrottleStats

__all__ = [
    "ActionStats",
    "AdminServerError",
    "AuthenticationError",
    "Charges",
    "ConfigurationError",
    "Limiter",
    "NamespaceNotFoundError",
    "PermissionDeniedError",
    "PolicyUnavailableError",
    "RGSparkError",
    "ResourceGroupClient",
    "ServerUnreachableError",
    "ThrottleStats",
    "ThrottledReader",
    "TokenBucket",
    "UnexpectedResponseError",
    "throttle",
    "throttled_sink",
]

# Objects defined in private modules present themselves as part of the public package,
# as httpx does, so reprs, tracebacks and documentation say `rgspark.TokenBucket`.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("rgspark._"):
        _obj.__module__ = __name__
del _name, _obj
