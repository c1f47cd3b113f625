"""A client's settings read from Spark's configuration, where Spark users set everything.

``spark-submit --conf spark.rgspark.url=...``, ``spark-defaults.conf``, or
``SparkSession.builder.config(...)``: `KEYS` lists the keys and the client option each sets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Union

from ._exceptions import ConfigurationError

__all__ = ["KEYS", "PREFIX", "NoPolicy", "options_from"]

#: What ``on_no_policy`` takes: ``"fail"``, ``"block"``, ``"unlimited"``, or safe rates by
#: dimension (``{"publishMsgs": 100}``).
NoPolicy = Union[str, Mapping[str, float]]

PREFIX = "spark.rgspark."
#: Each key (after the prefix) and the `ResourceGroupClient` option it sets.
KEYS = {
    "url": "url",
    "tenant": "tenant",
    "namespace": "namespace",
    "token": "token",
    "tokenFile": "token",
    "onNoPolicy": "on_no_policy",
    "startupTimeout": "startup_timeout_s",
    "timeout": "timeout_s",
}
REQUIRED = ("url", "tenant", "namespace")
# Spark's time strings: a number and a unit, as in spark.network.timeout=120s.
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|min|h)?\s*", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def options_from(get: Callable[[str], str | None]) -> dict[str, Any]:
    """`ResourceGroupClient`'s arguments from the ``spark.rgspark.*`` keys that `get` (a
    key's value, None when unset) finds; raises `ConfigurationError` naming the key."""
    values = {name: get(PREFIX + name) for name in KEYS}
    for name in REQUIRED:
        if not values[name]:
            raise ConfigurationError(
                f"{PREFIX}{name} is not set: set it (spark-submit --conf {PREFIX}{name}=..., or "
                f"SparkSession.builder.config), or pass a ResourceGroupClient"
            )
    options: dict[str, Any] = {name: values[name] for name in REQUIRED}
    if values["token"] and values["tokenFile"]:
        raise ConfigurationError(f"{PREFIX}token and {PREFIX}tokenFile are both set: keep one")
    if values["token"]:
        options["token"] = values["token"].strip()
    elif values["tokenFile"]:
        options["token"] = _read_token(values["tokenFile"])
    if values["onNoPolicy"]:
        options["on_no_policy"] = _no_policy(values["onNoPolicy"])
    for name in ("startupTimeout", "timeout"):
        duration = values[name]
        if duration:
            options[KEYS[name]] = _seconds(name, duration)
    return options


def rename(message: str, options: Mapping[str, Any]) -> str:
    """A `ResourceGroupClient` argument error, told with the key that set the argument."""
    for name, option in KEYS.items():
        if message.startswith(f"{option} ") and option in options and name != "tokenFile":
            return PREFIX + name + message[len(option) :]
    return message


def _read_token(value: str) -> str:
    """The token in the file (read on the driver): a path, or a ``file://`` URL as in
    Pulsar's ``authParams``."""
    path = Path(value[len("file://") :] if value.startswith("file://") else value)
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"{PREFIX}tokenFile cannot be read on the driver ({exc.strerror}: {path})"
        ) from None
    if not token:
        raise ConfigurationError(f"{PREFIX}tokenFile is empty: {path}")
    return token


def _no_policy(value: str) -> str | dict[str, float]:
    """``fail``, ``block``, ``unlimited``, or safe rates: ``publishMsgs=100,publishBytes=1e6``."""
    value = value.strip()
    if "=" not in value:
        return value  # the client says what it accepts
    rates = {}
    for part in value.split(","):
        dimension, _, rate = part.partition("=")
        try:
            rates[dimension.strip()] = float(rate)
        except ValueError:
            raise ConfigurationError(
                f"{PREFIX}onNoPolicy: {part.strip()!r} is not dimension=rate "
                "(e.g. publishMsgs=100,publishBytes=1048576)"
            ) from None
    return rates


def _seconds(name: str, value: str) -> float:
    """Seconds from a Spark time string: ``30s``, ``500ms``, ``2min``; a bare number is in
    seconds."""
    match = _DURATION.fullmatch(value)
    if match is None:
        raise ConfigurationError(
            f"{PREFIX}{name} must be a duration such as 30s, 500ms or 2min, not {value!r}"
        )
    return float(match.group(1)) * _SECONDS[(match.group(2) or "s").lower()]
