"""``rgadmin request-quotas``: requests per second per role, as Kafka's request quotas
(superusers)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.admin_client import admin_path, connect
from app.commands.output import show

cli = typer.Typer(
    help="Cap each role's requests per second to each server process (default and per role).",
    no_args_is_help=True,
)

RequestsPerSecond = Annotated[
    int,
    typer.Option("--requests-per-second", "-rps", help="Requests per second, per server process."),
]
RoleArgument = Annotated[str, typer.Argument(metavar="ROLE", help="The role (a token's subject).")]


@cli.command("get")
def get_quotas(ctx: typer.Context) -> None:
    """Print the default quota and the quotas per role, as JSON."""
    with connect(ctx) as admin:
        show(admin.read(admin_path("request-quotas")))


@cli.command("set-default")
def set_default(ctx: typer.Context, requests_per_second: RequestsPerSecond) -> None:
    """Set the quota of every role without its own."""
    with connect(ctx) as admin:
        body = {"requestsPerSecond": requests_per_second}
        admin.write("PUT", admin_path("request-quotas", "default"), body)


@cli.command("remove-default")
def remove_default(ctx: typer.Context) -> None:
    """Remove the default quota: roles without their own are no longer limited."""
    with connect(ctx) as admin:
        admin.write("DELETE", admin_path("request-quotas", "default"))


@cli.command("set")
def set_role(
    ctx: typer.Context, role: RoleArgument, requests_per_second: RequestsPerSecond
) -> None:
    """Set a role's own quota, overriding the default."""
    with connect(ctx) as admin:
        body = {"requestsPerSecond": requests_per_second}
        admin.write("PUT", admin_path("request-quotas", "roles", role), body)


@cli.command("remove")
def remove_role(ctx: typer.Context, role: RoleArgument) -> None:
    """Remove a role's own quota: the default applies to it again."""
    with connect(ctx) as admin:
        admin.write("DELETE", admin_path("request-quotas", "roles", role))
