"""``rgadmin``: serve, migrate and mint tokens, as ``pulsar tokens`` does; and administer a
server over HTTP with pulsar-admin's verbs (the commands in ``app.commands``)."""

from __future__ import annotations

import base64
import datetime
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from app import auth
from app.commands import (
    default_resource_group,
    namespaces,
    request_quotas,
    resourcegroups,
    tenants,
    top,
)
from app.commands.connection import ConnectionOptions
from app.config import DEFAULT_SECRET_KEY_FILE, Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# The server's own modules (uvicorn, SQLAlchemy, app.db) are imported by the commands that
# use them, so that the HTTP commands run where only the client's dependencies are installed.

GRACEFUL_SHUTDOWN_S = 5  # what a stopping server waits for requests in flight

cli = typer.Typer(
    help="Administer the ResourceGroups server: run it, or manage one over HTTP with "
    "pulsar-admin's verbs.\n\n"
    "The HTTP commands take the server's URL from --admin-url, else $RG_ADMIN_URL, else "
    "webServiceUrl in the config file, else http://127.0.0.1:8080; and the token from "
    "--auth-params, else $RG_ADMIN_TOKEN, else authParams in the config file. The config file "
    "is in Pulsar's client.conf format: $RG_ADMIN_CONFIG, else "
    "$XDG_CONFIG_HOME/rgadmin/client.conf (~/.config/rgadmin/client.conf).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold keys
)
tokens = typer.Typer(
    help="Create keys and tokens (compatible with `pulsar tokens`).", no_args_is_help=True
)
cli.add_typer(tokens, name="tokens")


@cli.callback()
def connection(
    ctx: typer.Context,
    admin_url: Annotated[
        str | None,
        typer.Option(
            "--admin-url",
            help="The server the HTTP commands administer. Default: http://127.0.0.1:8080.",
            show_default=False,
        ),
    ] = None,
    auth_params: Annotated[
        str | None,
        typer.Option(
            "--auth-params",
            help="Their token: token:TOKEN, or file:///path of a file holding it.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Administer the ResourceGroups server."""
    # Resolved by each HTTP command, so that a bad setting never stops `serve` or `tokens`.
    ctx.obj = ConnectionOptions(admin_url=admin_url, auth_params=auth_params)


class KeyPairAlgorithm(StrEnum):
    RS256 = "RS256"
    ES256 = "ES256"


class KeyFormat(StrEnum):
    DER = "der"
    PEM = "pem"


def main() -> None:
    cli()


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(code)


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only, from the first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def _file_url(path: Path) -> str:
    return path.resolve().as_uri()


# tokens


@tokens.command("create-secret-key")
def create_secret_key(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the key to this file.")
    ] = None,
    base64_: Annotated[
        bool, typer.Option("--base64", help="Base64-encode the key (for data:;base64,...).")
    ] = False,
) -> None:
    """Create a random HS256 secret key (raw bytes, or base64 with --base64)."""
    key = auth.generate_secret_key()
    data = base64.b64encode(key) + b"\n" if base64_ else key
    if output is not None:
        _write_private(output, data)
        if not base64_:
            typer.echo(f"Server setting: RG_AUTH_TOKEN_SECRET_KEY={_file_url(output)}", err=True)
    elif base64_:
        typer.echo(data.decode().strip())
    elif _stdout_is_terminal():
        _fail("Refusing to print a raw binary key to a terminal; use --output PATH or --base64.")
    else:
        typer.get_binary_stream("stdout").write(data)


@tokens.command("create-key-pair")
def create_key_pair(
    output_private_key: Annotated[
        Path, typer.Option("--output-private-key", help="File for the private (signing) key.")
    ],
    output_public_key: Annotated[
        Path, typer.Option("--output-public-key", help="File for the public (server) key.")
    ],
    algorithm: Annotated[
        KeyPairAlgorithm, typer.Option("--algorithm", "--signature-algorithm", "-a")
    ] = KeyPairAlgorithm.RS256,
    key_format: Annotated[
        KeyFormat, typer.Option("--format", help="DER is what Pulsar writes and reads.")
    ] = KeyFormat.DER,
) -> None:
    """Create an RS256 or ES256 key pair: the private key signs, the server gets the public one."""
    pair = auth.generate_key_pair(algorithm.value, pem=key_format is KeyFormat.PEM)
    _write_private(output_private_key, pair.private_key)
    output_public_key.parent.mkdir(parents=True, exist_ok=True)
    output_public_key.write_bytes(pair.public_key)
    typer.echo(
        f"Wrote the {algorithm.value} key pair in {key_format.name} format: "
        f"private key {output_private_key} (keep it secret), public key {output_public_key}.\n"
        f"Server setting: RG_AUTH_TOKEN_PUBLIC_KEY={_file_url(output_public_key)}",
        err=True,
    )


@tokens.command("create")
def create(
    subject: Annotated[str, typer.Option("--subject", "-s", help="The role the token speaks for.")],
    expiry: Annotated[
        str | None,
        typer.Option(
            "--expiry",
            "--expiry-time",
            "-e",
            help="Lifetime such as 45s, 30m, 1h, 7d, 1y. Default: never expires.",
        ),
    ] = None,
    secret_key: Annotated[
        str | None,
        typer.Option("--secret-key", help="HS256 key: file:///path or data:;base64,..."),
    ] = None,
    private_key: Annotated[
        str | None,
        typer.Option("--private-key", help="RS256/ES256 key: file:///path or data:;base64,..."),
    ] = None,
) -> None:
    """Print a new token for ROLE, signed with the given key or else the server's secret key."""
    try:
        expires_in = auth.parse_expiry(expiry) if expiry is not None else None
        if secret_key is not None and private_key is not None:
            raise ValueError("Pass --secret-key or --private-key, not both.")
        if private_key is not None:
            token = auth.create_token(
                subject=subject, private_key=auth.load_key(private_key), expires_in=expires_in
            )
        else:
            key = auth.load_key(secret_key) if secret_key else _default_secret_key(get_settings())
            token = auth.create_token(subject=subject, secret_key=key, expires_in=expires_in)
    except ValueError as exc:
        _fail(str(exc))
    typer.echo(token)


def _default_secret_key(settings: Settings) -> bytes:
    """The key the server signs with when none is given: the setting, else the generated file."""
    if settings.auth_token_secret_key:
        return auth.load_key(settings.auth_token_secret_key)
    if DEFAULT_SECRET_KEY_FILE.is_file():
        return DEFAULT_SECRET_KEY_FILE.read_bytes()
    raise ValueError(
        "No key given and none configured: pass --secret-key file:///path (or a key pair's "
        "key), set RG_AUTH_TOKEN_SECRET_KEY, or run `rgadmin serve` once in this directory "
        f"to generate {DEFAULT_SECRET_KEY_FILE}."
    )


@tokens.command("validate")
def validate(
    token: Annotated[str, typer.Argument(help="The token to check.")],
    secret_key: Annotated[
        str | None, typer.Option("--secret-key", help="Default: the server's key.")
    ] = None,
    public_key: Annotated[
        str | None, typer.Option("--public-key", help="Default: the server's key.")
    ] = None,
) -> None:
    """Check a token against the server's key (or the given one) and print its subject."""
    try:
        verifier = _verifier(get_settings(), secret_key, public_key)
        info = verifier.verify(token)
    except ValueError as exc:
        _fail(str(exc))
    except auth.InvalidToken as exc:
        _fail(f"Invalid token: {exc.reason}")
    typer.echo(f"Subject: {info.role}")
    typer.echo(f"Expires: {_describe_expiry(info.expires_at)}")


def _verifier(
    settings: Settings, secret_key: str | None, public_key: str | None
) -> auth.TokenVerifier:
    if secret_key is not None or public_key is not None:
        return auth.TokenVerifier(
            secret_key=auth.load_key(secret_key) if secret_key else None,
            public_key=auth.load_key(public_key) if public_key else None,
        )
    if settings.auth_token_secret_key or settings.auth_token_public_key:
        return auth.TokenVerifier.from_settings(settings)
    return auth.TokenVerifier(secret_key=_default_secret_key(settings))


def _describe_expiry(expires_at: int | None) -> str:
    if expires_at is None:
        return "never"
    moment = datetime.datetime.fromtimestamp(expires_at, tz=datetime.UTC)
    return moment.isoformat()


# server


@cli.command()
def migrate() -> None:
    """Create or upgrade the database schema (alembic upgrade head) at RG_DATABASE_URL."""
    # Imported here so that the token commands never load the database layer.
    from app.db import upgrade_schema

    settings = get_settings()
    upgrade_schema(settings.database_url)
    typer.echo(f"Schema is up to date at {_redacted(settings.database_url)}.", err=True)


# `check` exits with 1 when it finds violations, and with this when it cannot look.
CHECK_UNREADABLE = 2


@cli.command()
def check() -> None:
    """Verify the store at RG_DATABASE_URL, read-only in one snapshot (safe beside running
    servers): every group's sums in force equal the allocations of the rows counted in it, no
    gone reporter is counted, attachments name existing groups.

    Prints one line per violation and exits with 1 when there is any; 2 when the database
    cannot be read or its schema is behind.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from app.quota.check import find_violations
    from app.quota.snapshot import Unreadable, read_snapshot, reading

    settings = get_settings()
    try:
        with reading(settings.database_url) as connection:
            now = datetime.datetime.now(datetime.UTC)
            snapshot = read_snapshot(connection, now)
    except Unreadable as exc:
        _fail(f"{exc} {_where(settings.database_url)}.", CHECK_UNREADABLE)
    except SQLAlchemyError as exc:
        reason = _first_line(getattr(exc, "orig", None) or exc)
        _fail(f"Cannot read the store {_where(settings.database_url)}: {reason}", CHECK_UNREADABLE)
    violations = find_violations(snapshot, settings.report_interval_seconds)
    for violation in violations:
        typer.echo(str(violation))
    if violations:
        raise typer.Exit(1)
    typer.echo(
        f"ok: {len(snapshot.groups)} groups, {len(snapshot.counted)} rows counted in them, "
        f"{len(snapshot.attachments)} attachments checked"
    )


def _where(database_url: str) -> str:
    from sqlalchemy.exc import ArgumentError

    try:
        return f"(database {_redacted(database_url)})"
    except ArgumentError:
        return "(RG_DATABASE_URL is not a database URL)"


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = True,
) -> None:
    """Run the admin server.

    On the first run with authentication on and no key configured, a secret key is generated
    in data/secret.key. A SQLite database (the default) is created and migrated on start;
    a PostgreSQL one is not: run `rgadmin migrate` first, and after each upgrade (the server
    refuses to start on a schema behind its own).
    """
    import math

    import uvicorn

    from app.quota.leases import keep_alive_s

    settings = _bootstrap()
    _announce(settings, host, port)
    uvicorn.run(
        "app.main:app",
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=access_log,
        proxy_headers=False,
        # Workers hold long polls on admin changes (`app.quota.changes`): a stopping server
        # ends them after this, and the workers poll the next one.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        timeout_keep_alive=math.ceil(
            keep_alive_s(settings.report_interval_seconds, settings.report_lease_seconds)
        ),
    )


def _bootstrap() -> Settings:
    settings = get_settings()
    if settings.auth_enabled and not (
        settings.auth_token_secret_key or settings.auth_token_public_key
    ):
        key_file = DEFAULT_SECRET_KEY_FILE.resolve()
        if not key_file.exists():
            _write_private(key_file, auth.generate_secret_key())
            typer.echo(f"Generated a secret key for signing tokens: {key_file}", err=True)
        # The app, and any worker process, builds its settings from the environment.
        os.environ["RG_AUTH_TOKEN_SECRET_KEY"] = key_file.as_uri()
        get_settings.cache_clear()
        settings = get_settings()
    if settings.auth_enabled:
        _check_keys(settings)
    if _is_sqlite(settings.database_url):
        from app.db import upgrade_schema

        upgrade_schema(settings.database_url)
    else:
        _check_schema(settings.database_url)
    return settings


def _check_schema(database_url: str) -> None:
    """Refuse, in one line, a database behind this server's migrations: served, it would pass
    for healthy while every request failed on a missing table or column."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    from app.db import make_engine
    from app.schema_version import read_state

    where = f"(database {_redacted(database_url)})"
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            state = read_state(connection)
    except (OperationalError, InterfaceError) as exc:
        # Down for now: serve anyway, as on an outage later; /health says 503 until it is
        # back, and then whether its schema is behind.
        typer.echo(f"The database does not answer {where}: {_first_line(exc.orig)}", err=True)
        return
    except DBAPIError as exc:
        _fail(f"Cannot read the database's schema revision {where}: {_first_line(exc.orig)}")
    finally:
        engine.dispose()
    if state.behind:
        _fail(f"{state.describe()} {where}.")
    if state.unknown:
        typer.echo(f"Warning: {state.describe()} {where}.", err=True)


def _first_line(error: BaseException | None) -> str:
    return str(error).strip().partition("\n")[0]


def _check_keys(settings: Settings) -> None:
    """Fail now with a plain message rather than with a traceback from every worker."""
    try:
        auth.TokenVerifier.from_settings(settings)
    except ValueError as exc:
        _fail(str(exc))


def _announce(settings: Settings, host: str, port: int) -> None:
    # stderr, like uvicorn's log: stdout may be block-buffered when it is not a terminal.
    def say(line: str) -> None:
        typer.echo(line, err=True)

    if not settings.auth_enabled:
        say("Authentication is disabled (RG_AUTH_ENABLED=false): requests need no token.")
    elif not settings.superusers:
        say("No superuser roles are configured (RG_SUPERUSER_ROLES).")
    else:
        roles = [role.strip() for role in settings.superuser_roles.split(",") if role.strip()]
        command = f"rgadmin tokens create --subject {roles[0]}"
        if not settings.auth_token_secret_key:
            command += " --private-key file:///path/to/private.key"
        say(f"Superuser roles: {', '.join(roles)}. Get a token with: {command}")
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    say(f"API docs: http://{shown_host}:{port}/docs")


def _url(database_url: str) -> URL:
    from sqlalchemy.engine import make_url

    return make_url(database_url)


def _is_sqlite(database_url: str) -> bool:
    return _url(database_url).get_backend_name() == "sqlite"


def _redacted(database_url: str) -> str:
    return _url(database_url).render_as_string(hide_password=True)


# pulsar-admin's verbs, over HTTP (app.commands)

ADMIN_PANEL = "Administer a server over HTTP (pulsar-admin's verbs)"
cli.add_typer(resourcegroups.cli, name="resourcegroups", rich_help_panel=ADMIN_PANEL)
cli.add_typer(tenants.cli, name="tenants", rich_help_panel=ADMIN_PANEL)
cli.add_typer(namespaces.cli, name="namespaces", rich_help_panel=ADMIN_PANEL)
cli.add_typer(
    default_resource_group.cli, name="default-resource-group", rich_help_panel=ADMIN_PANEL
)
cli.add_typer(request_quotas.cli, name="request-quotas", rich_help_panel=ADMIN_PANEL)
cli.command("top", rich_help_panel=ADMIN_PANEL)(top.top)


if __name__ == "__main__":
    main()
