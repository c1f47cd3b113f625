"""``rgadmin default-resource-group``: the group of every namespace without its own or its
tenant's (superusers; Kafka's default quota entity)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.admin_client import admin_path, connect
from app.commands.output import show

cli = typer.Typer(
    help="Manage the default ResourceGroup: the group of namespaces without their own or "
    "their tenant's.",
    no_args_is_help=True,
)

PATH = admin_path("default-resourcegroup")


@cli.command("get")
def get_default(ctx: typer.Context) -> None:
    """Print the name of the default ResourceGroup, or null."""
    with connect(ctx) as admin:
        show(admin.read(PATH))


@cli.command("set")
def set_default(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(metavar="RESOURCE_GROUP", help="An existing group.")],
) -> None:
    """Make a ResourceGroup the default."""
    with connect(ctx) as admin:
        admin.write("POST", admin_path("default-resourcegroup", group))


@cli.command("remove")
def remove_default(ctx: typer.Context) -> None:
    """Remove the default ResourceGroup: the namespaces it covered become unlimited."""
    with connect(ctx) as admin:
        admin.write("DELETE", PATH)
