"""rgspark: Pulsar-style ResourceGroup rate limits, enforced inside PySpark jobs.

Every worker process enforces its share of a group's rate with an in-process token bucket
(Apache Pulsar's PIP-322); callers limited by several buckets at once wait for all of them,
first in, first out. Errors are described in `rgspark._exceptions`.
"""

from __future__ import annotations

from ._bucket import TokenBucket
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

__all__ = [
    "AdminServerError",
    "AuthenticationError",
    "Charges",
    "ConfigurationError",
    "Limiter",
    "NamespaceNotFoundError",
    "PermissionDeniedError",
    "PolicyUnavailableError",
    "RGSparkError",
    "ServerUnreachableError",
    "TokenBucket",
    "UnexpectedResponseError",
]

# Objects defined in private modules present themselves as part of the public package,
# as httpx does, so reprs, tracebacks and documentation say `rgspark.TokenBucket`.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("rgspark._"):
        _obj.__module__ = __name__
del _name, _obj
