"""Where the server commands find the server and their token, as pulsar-admin does.

Each setting is looked up on its own, first found wins:

1. the root options ``--admin-url URL`` and ``--auth-params token:TOKEN`` (or
   ``file:///path``, a file holding the token);
2. the environment: ``RG_ADMIN_URL`` and ``RG_ADMIN_TOKEN`` (the token itself);
3. a config file in Pulsar's ``client.conf`` format (``webServiceUrl=...``,
   ``authParams=token:...`` or ``file:///...``): ``$RG_ADMIN_CONFIG``, else
   ``$XDG_CONFIG_HOME/rgadmin/client.conf`` (``~/.config/rgadmin/client.conf``);
4. ``http://127.0.0.1:8080`` and no token.

So a URL given on the command line may go with the config file's token, as in pulsar-admin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
URL_VARIABLE = "RG_ADMIN_URL"
TOKEN_VARIABLE = "RG_ADMIN_TOKEN"
CONFIG_VARIABLE = "RG_ADMIN_CONFIG"
AUTH_PARAMS_FORMS = "token:TOKEN or file:///path/to/token"


class CommandError(Exception):
    """A failure told to the user in one line; the command then exits with status 1."""


@dataclass(frozen=True)
class ConnectionOptions:
    """The root command's ``--admin-url`` and ``--auth-params``; None where not given."""

    admin_url: str | None = None
    auth_params: str | None = None


@dataclass(frozen=True)
class Connection:
    url: str
    token: str | None
    # Named when the server refuses the token, so the user knows which one to fix.
    token_source: str | None


def config_path(environ: Mapping[str, str]) -> Path:
    """The client.conf the commands read: ``$RG_ADMIN_CONFIG``, else the user's config dir."""
    if explicit := environ.get(CONFIG_VARIABLE):
        return Path(explicit).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "rgadmin" / "client.conf"


def resolve(options: ConnectionOptions, environ: Mapping[str, str] | None = None) -> Connection:
    """The URL and token in force, from the options, the environment and the config file."""
    environ = os.environ if environ is None else environ
    path = config_path(environ)

    @cache  # read only when the options and environment leave something to find
    def config() -> Mapping[str, str]:
        return read_client_conf(path, required=bool(environ.get(CONFIG_VARIABLE)))

    if options.admin_url is not None:
        url, url_source = options.admin_url, "--admin-url"
    elif environ.get(URL_VARIABLE):
        url, url_source = environ[URL_VARIABLE], URL_VARIABLE
    elif config().get("webServiceUrl"):
        url, url_source = config()["webServiceUrl"], f"webServiceUrl in {path}"
    else:
        url, url_source = DEFAULT_ADMIN_URL, "the default"
    _check_url(url, url_source)

    token: str | None
    if options.auth_params is not None:
        token_source = "--auth-params"
        token = token_from_auth_params(options.auth_params, token_source)
    elif environ.get(TOKEN_VARIABLE, "").strip():
        token_source = TOKEN_VARIABLE
        token = environ[TOKEN_VARIABLE].strip()
    elif config().get("authParams"):
        token_source = f"authParams in {path}"
        token = token_from_auth_params(config()["authParams"], token_source)
    else:
        token = token_source = None
    return Connection(url=url.rstrip("/"), token=token, token_source=token_source)


def read_client_conf(path: Path, *, required: bool) -> dict[str, str]:
    """The ``key=value`` (or ``key: value``) lines of a Java properties file such as Pulsar's
    client.conf; ``#`` and ``!`` start comments. Line continuations are not supported: no
    setting read here needs one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise CommandError(f"Config file {path} ({CONFIG_VARIABLE}) does not exist.") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"Cannot read config file {path}: {_describe(exc)}.") from exc
    settings: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        # The key ends at the first '=', ':' or blank, as in java.util.Properties.
        end = next((i for i, char in enumerate(line) if char in "=:" or char.isspace()), len(line))
        value = line[end:].lstrip()
        if value[:1] in ("=", ":"):
            value = value[1:].lstrip()
        settings[line[:end]] = value
    return settings


def token_from_auth_params(auth_params: str, source: str) -> str:
    """The token in Pulsar's token auth params: ``token:TOKEN`` or ``file:///path``."""
    # The value is never echoed back: it may be the token itself.
    value = auth_params.strip()
    if value.startswith("token:"):
        token = value.removeprefix("token:").strip()
    elif value.startswith("file:"):
        token = _read_token_file(value, source)
    else:
        raise CommandError(f"{source}: expected {AUTH_PARAMS_FORMS}.")
    if not token:
        raise CommandError(f"{source}: the token is empty.")
    return token


def _read_token_file(file_url: str, source: str) -> str:
    url = urlsplit(file_url)
    path = Path(url2pathname(url.path))
    # file://token.txt would silently mean host "token.txt"; insist on an absolute path.
    if url.netloc not in ("", "localhost") or not path.is_absolute():
        raise CommandError(f"{source}: a token file needs an absolute path: file:///path/to/token.")
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{source}: cannot read token file {path}: {_describe(exc)}.") from exc


def _check_url(url: str, source: str) -> None:
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad port or IPv6 literal
        valid = False
    if not valid:
        raise CommandError(
            f"Invalid admin URL {url!r} (from {source}): expected http://host:port or https://..."
        )


def _describe(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
