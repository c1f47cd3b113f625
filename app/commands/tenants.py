"""``rgadmin tenants``: pulsar-admin's verbs for tenants, and the group of a whole tenant."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.admin_client import AdminClient, admin_path, connect
from app.commands.output import show, show_names, split_list

cli = typer.Typer(
    help="Manage tenants and the ResourceGroup of a whole tenant (as pulsar-admin tenants).",
    no_args_is_help=True,
)

TenantName = Annotated[str, typer.Argument(metavar="TENANT", help="The tenant's name.")]
GroupName = Annotated[
    str,
    typer.Option(
        "--resource-group-name", "-rgn", help="The ResourceGroup to attach.", show_default=False
    ),
]


def available_clusters(admin: AdminClient) -> list[str]:
    """Every cluster the server lists, as pulsar-admin gives a new tenant; none on a server
    without ``/admin/v2/clusters``."""
    response = admin.send("GET", admin_path("clusters"))
    if response.status_code == 404:
        return []
    return [str(cluster) for cluster in admin.body_of(response)]


@cli.command("list")
def list_tenants(ctx: typer.Context) -> None:
    """List the names of all tenants, one a line."""
    with connect(ctx) as admin:
        show_names(admin.read(admin_path("tenants")))


@cli.command("get")
def get_tenant(ctx: typer.Context, tenant: TenantName) -> None:
    """Print a tenant's admin roles and allowed clusters as JSON."""
    with connect(ctx) as admin:
        show(admin.read(admin_path("tenants", tenant)))


@cli.command("create")
def create_tenant(
    ctx: typer.Context,
    tenant: TenantName,
    admin_roles: Annotated[
        list[str] | None,
        typer.Option(
            "--admin-roles",
            "-r",
            help="Roles that administer the tenant, comma separated (a,b). Default: none.",
        ),
    ] = None,
    allowed_clusters: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-clusters",
            "-c",
            help="Clusters the tenant may use, comma separated. Default: every cluster the "
            "server lists.",
        ),
    ] = None,
) -> None:
    """Create a tenant."""
    with connect(ctx) as admin:
        clusters = split_list(allowed_clusters) or available_clusters(admin)
        body = {"adminRoles": split_list(admin_roles) or [], "allowedClusters": clusters}
        admin.write("PUT", admin_path("tenants", tenant), body)


@cli.command("update")
def update_tenant(
    ctx: typer.Context,
    tenant: TenantName,
    admin_roles: Annotated[
        list[str] | None,
        typer.Option(
            "--admin-roles",
            "-r",
            help="Roles that administer the tenant, comma separated. Default: unchanged.",
        ),
    ] = None,
    allowed_clusters: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-clusters",
            "-c",
            help="Clusters the tenant may use, comma separated. Default: unchanged.",
        ),
    ] = None,
) -> None:
    """Change a tenant's admin roles or allowed clusters; what is not given is kept."""
    roles, clusters = split_list(admin_roles), split_list(allowed_clusters)
    path = admin_path("tenants", tenant)
    with connect(ctx) as admin:
        # The server replaces both lists; read what is to be kept, as pulsar-admin does.
        if roles is None or clusters is None:
            current = admin.read(path)
            roles = current["adminRoles"] if roles is None else roles
            clusters = current["allowedClusters"] if clusters is None else clusters
        admin.write("POST", path, {"adminRoles": roles, "allowedClusters": clusters})


@cli.command("delete")
def delete_tenant(ctx: typer.Context, tenant: TenantName) -> None:
    """Delete a tenant that has no namespaces."""
    with connect(ctx) as admin:
        admin.write("DELETE", admin_path("tenants", tenant))


@cli.command("set-resource-group")
def set_resource_group(ctx: typer.Context, tenant: TenantName, group: GroupName) -> None:
    """Attach a ResourceGroup to a tenant: its namespaces without their own group use it."""
    with connect(ctx) as admin:
        admin.write("POST", admin_path("tenants", tenant, "resourcegroup", group))


@cli.command("get-resource-group")
def get_resource_group(ctx: typer.Context, tenant: TenantName) -> None:
    """Print the name of the tenant's ResourceGroup, or null."""
    with connect(ctx) as admin:
        show(admin.read(admin_path("tenants", tenant, "resourcegroup")))


@cli.command("remove-resource-group")
def remove_resource_group(ctx: typer.Context, tenant: TenantName) -> None:
    """Detach the ResourceGroup from a tenant."""
    with connect(ctx) as admin:
        admin.write("DELETE", admin_path("tenants", tenant, "resourcegroup"))
