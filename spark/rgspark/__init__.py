"""rgspark: Pulsar-style ResourceGroup rate limits, enforced inside PySpark jobs.

A job names its tenant and namespace with a `ResourceGroupClient`; `throttle(df, client,
kind)` holds a DataFrame's flow to the namespace's group. Every worker process enforces its
share of the group's rate with an in-process token bucket (Apache Pulsar's PIP-322), reports
its usage and receives its fair share (PIP-82). Errors are described in `rgspark._exceptions`;
the names and figures that reports and answers share with the server are in `rgspark.wire`.
`rgspark.__version__` is the version of the distribution (resourcegroups-spark) it came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._bucket import TokenBucket
from ._client import ResourceGroupClient
from ._exceptions import (
    AdminServerError,
    AuthenticationError,
    ConfigurationError,
    FiguresNotCountedError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    PolicyUnavailableError,
    PushbackNotRetriedError,
    RGSparkError,
    ServerUnreachableError,
    SlowDown,
    UnexpectedResponseError,
)
from ._limiter import Charges, Limiter
from ._reader import ThrottledReader
from ._spark import throttle, throttled_sink
from ._stats import ActionStats, ThrottleStats
from ._throttled import throttled

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ActionStats",
    "AdminServerError",
    "AuthenticationError",
    "Charges",
    "ConfigurationError",
    "FiguresNotCountedError",
    "Limiter",
    "NamespaceNotFoundError",
    "PermissionDeniedError",
    "PolicyUnavailableError",
    "PushbackNotRetriedError",
    "RGSparkError",
    "ResourceGroupClient",
    "ServerUnreachableError",
    "SlowDown",
    "ThrottleStats",
    "ThrottledReader",
    "TokenBucket",
    "UnexpectedResponseError",
    "throttle",
    "throttled",
    "throttled_sink",
]

# Objects defined in private modules present themselves as part of the public package,
# as httpx does, so reprs, tracebacks and documentation say `rgspark.TokenBucket`.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("rgspark._"):
        _obj.__module__ = __name__
del _name, _obj

_DISTRIBUTION = "resourcegroups-spark"
_UNKNOWN_VERSION = "0+unknown"
# Read on first use (module `__getattr__`): importing the package metadata machinery would
# add a fifth to every worker's `import rgspark`, for a string few read.
__version__: str


def __getattr__(name: str) -> str:
    if name == "__version__":
        version: str = globals().setdefault("__version__", _version())
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _version() -> str:
    """The installed distribution's version; else, in a source checkout, its
    ``pyproject.toml``'s; else (a zip shipped with ``--py-files``) `_UNKNOWN_VERSION`."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        checkout = Path(__file__).resolve().parent.parent.parent  # <root>/spark/rgspark
        return _checkout_version(checkout / "pyproject.toml") or _UNKNOWN_VERSION


def _checkout_version(pyproject: Path) -> str | None:
    """The ``[project]`` version that `pyproject` gives this distribution; None when it is
    not there or names another project. A pattern, not a TOML parser: Python 3.9 has none,
    and these two lines of a file this repository writes are all it reads."""
    import re

    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    if project is None:
        return None
    table = project.group(1)
    name = re.search(r'^name\s*=\s*"([^"]*)"', table, re.MULTILINE)
    version = re.search(r'^version\s*=\s*"([^"]+)"', table, re.MULTILINE)
    if name is None or name.group(1) != _DISTRIBUTION or version is None:
        return None
    return version.group(1)
