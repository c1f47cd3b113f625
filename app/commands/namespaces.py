"""``rgadmin namespaces``: pulsar-admin's verbs for namespaces, their permissions and group."""

from __future__ import annotations

from typing import Annotated, NamedTuple

import typer

from app.commands.admin_client import admin_path, connect
from app.commands.output import show, show_names, split_list

cli = typer.Typer(
    help="Manage namespaces, their permissions and their ResourceGroup "
    "(as pulsar-admin namespaces).",
    no_args_is_help=True,
)


class Namespace(NamedTuple):
    tenant: str
    name: str


def parse_namespace(value: str) -> Namespace:
    tenant, slash, name = value.partition("/")
    if not (tenant and slash and name) or "/" in name:
        raise typer.BadParameter(f"{value!r} is not tenant/namespace.")
    return Namespace(tenant, name)


NamespaceArgument = Annotated[
    Namespace,
    typer.Argument(metavar="TENANT/NAMESPACE", parser=parse_namespace, show_default=False),
]
TenantArgument = Annotated[str, typer.Argument(metavar="TENANT", help="The tenant's name.")]
Role = Annotated[str, typer.Option("--role", help="The role (a token's subject).")]


def _path(namespace: Namespace, *rest: str) -> str:
    return admin_path("namespaces", namespace.tenant, namespace.name, *rest)


@cli.command("list")
def list_namespaces(ctx: typer.Context, tenant: TenantArgument) -> None:
    """List a tenant's namespaces as tenant/namespace, one a line."""
    with connect(ctx) as admin:
        show_names(admin.read(admin_path("namespaces", tenant)))


@cli.command("create")
def create_namespace(ctx: typer.Context, namespace: NamespaceArgument) -> None:
    """Create a namespace in an existing tenant."""
    with connect(ctx) as admin:
        admin.write("PUT", _path(namespace))


@cli.command("policies")
def policies(ctx: typer.Context, namespace: NamespaceArgument) -> None:
    """Print a namespace's policies (permissions, cluster, own ResourceGroup) as JSON."""
    with connect(ctx) as admin:
        show(admin.read(_path(namespace)))


@cli.command("delete")
def delete_namespace(ctx: typer.Context, namespace: NamespaceArgument) -> None:
    """Delete a namespace, with its permissions and its attachment."""
    with connect(ctx) as admin:
        admin.write("DELETE", _path(namespace))


@cli.command("permissions")
def permissions(ctx: typer.Context, namespace: NamespaceArgument) -> None:
    """Print the actions each role is granted on a namespace, as JSON."""
    with connect(ctx) as admin:
        show(admin.read(_path(namespace, "permissions")))


@cli.command("grant-permission")
def grant_permission(
    ctx: typer.Context,
    namespace: NamespaceArgument,
    role: Role,
    actions: Annotated[
        list[str],
        typer.Option(
            "--actions",
            help="Actions, comma separated: produce,consume (what Spark jobs need to report).",
        ),
    ],
) -> None:
    """Grant a role actions on a namespace, replacing those it had."""
    with connect(ctx) as admin:
        admin.write("POST", _path(namespace, "permissions", role), split_list(actions))


@cli.command("revoke-permission")
def revoke_permission(ctx: typer.Context, namespace: NamespaceArgument, role: Role) -> None:
    """Revoke all of a role's actions on a namespace."""
    with connect(ctx) as admin:
        admin.write("DELETE", _path(namespace, "permissions", role))


@cli.command("set-resource-group")
def set_resource_group(
    ctx: typer.Context,
    namespace: NamespaceArgument,
    group: Annotated[
        str, typer.Option("--resource-group-name", "-rgn", help="The ResourceGroup to attach.")
    ],
) -> None:
    """Attach a ResourceGroup to a namespace; it takes precedence over its tenant's."""
    with connect(ctx) as admin:
        admin.write("POST", _path(namespace, "resourcegroup", group))


@cli.command("get-resource-group")
def get_resource_group(
    ctx: typer.Context,
    namespace: NamespaceArgument,
    applied: Annotated[
        bool,
        typer.Option(
            "--applied",
            help="Print the group that applies (its own, else its tenant's, else the default) "
            "and where it comes from, as JSON.",
        ),
    ] = False,
) -> None:
    """Print the name of the namespace's own ResourceGroup, or null."""
    with connect(ctx) as admin:
        params = {"applied": "true"} if applied else None
        show(admin.read(_path(namespace, "resourcegroup"), params=params))


@cli.command("remove-resource-group")
def remove_resource_group(ctx: typer.Context, namespace: NamespaceArgument) -> None:
    """Detach the ResourceGroup from a namespace (its tenant's, else the default, then applies)."""
    with connect(ctx) as admin:
        admin.write("DELETE", _path(namespace, "resourcegroup"))
