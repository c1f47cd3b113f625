"""``rgadmin resourcegroups``: pulsar-admin's verbs for ResourceGroups (rate quotas)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from app.commands.admin_client import AdminClient, admin_path, connect
from app.commands.connection import CommandError
from app.commands.output import show, show_names

cli = typer.Typer(
    help="Manage ResourceGroups: named rate quotas (as pulsar-admin resourcegroups).",
    no_args_is_help=True,
)


class GroupModeChoice(StrEnum):
    """`rgspark.wire.MODES`, as the command line takes them."""

    enforce = "enforce"
    observe = "observe"


GroupName = Annotated[str, typer.Argument(metavar="RESOURCE_GROUP", help="The group's name.")]
_PER_SECOND = "per second; -1 or 0 is unlimited"
MsgPublishRate = Annotated[
    int | None, typer.Option("--msg-publish-rate", "-mp", help=f"Messages published {_PER_SECOND}.")
]
BytePublishRate = Annotated[
    int | None, typer.Option("--byte-publish-rate", "-bp", help=f"Bytes published {_PER_SECOND}.")
]
MsgDispatchRate = Annotated[
    int | None,
    typer.Option("--msg-dispatch-rate", "-md", help=f"Messages dispatched {_PER_SECOND}."),
]
ByteDispatchRate = Annotated[
    int | None,
    typer.Option("--byte-dispatch-rate", "-bd", help=f"Bytes dispatched {_PER_SECOND}."),
]
ReplicationMsgRate = Annotated[
    int | None,
    typer.Option(
        "--replication-msg-dispatch-rate",
        help="Stored for compatibility with Pulsar; not enforced.",
    ),
]
ReplicationByteRate = Annotated[
    int | None,
    typer.Option(
        "--replication-byte-dispatch-rate",
        help="Stored for compatibility with Pulsar; not enforced.",
    ),
]


def _rates(
    publish_msgs: int | None,
    publish_bytes: int | None,
    dispatch_msgs: int | None,
    dispatch_bytes: int | None,
    replication_msgs: int | None,
    replication_bytes: int | None,
) -> dict[str, int | None]:
    return {
        "publishRateInMsgs": publish_msgs,
        "publishRateInBytes": publish_bytes,
        "dispatchRateInMsgs": dispatch_msgs,
        "dispatchRateInBytes": dispatch_bytes,
        "replicationDispatchRateInMsgs": replication_msgs,
        "replicationDispatchRateInBytes": replication_bytes,
    }


def _exists(admin: AdminClient, path: str) -> bool:
    response = admin.send("GET", path)
    if response.status_code == 404:
        return False
    admin.checked(response)
    return True


@cli.command("list")
def list_groups(ctx: typer.Context) -> None:
    """List the names of all ResourceGroups, one a line."""
    with connect(ctx) as admin:
        show_names(admin.read(admin_path("resourcegroups")))


@cli.command("get")
def get_group(ctx: typer.Context, name: GroupName) -> None:
    """Print a ResourceGroup's rates as JSON."""
    with connect(ctx) as admin:
        show(admin.read(admin_path("resourcegroups", name)))


@cli.command("create")
def create_group(
    ctx: typer.Context,
    name: GroupName,
    msg_publish_rate: MsgPublishRate = None,
    byte_publish_rate: BytePublishRate = None,
    msg_dispatch_rate: MsgDispatchRate = None,
    byte_dispatch_rate: ByteDispatchRate = None,
    replication_msg_dispatch_rate: ReplicationMsgRate = None,
    replication_byte_dispatch_rate: ReplicationByteRate = None,
) -> None:
    """Create a ResourceGroup; rates not given are -1 (unlimited)."""
    rates = _rates(
        msg_publish_rate,
        byte_publish_rate,
        msg_dispatch_rate,
        byte_dispatch_rate,
        replication_msg_dispatch_rate,
        replication_byte_dispatch_rate,
    )
    path = admin_path("resourcegroups", name)
    with connect(ctx) as admin:
        # The server's PUT also updates; creating must not reset an existing group's rates.
        if _exists(admin, path):
            raise CommandError(
                f"ResourceGroup {name} already exists; change it with "
                "`rgadmin resourcegroups update`."
            )
        admin.write(
            "PUT", path, {field: -1 if rate is None else rate for field, rate in rates.items()}
        )


@cli.command("update")
def update_group(
    ctx: typer.Context,
    name: GroupName,
    msg_publish_rate: MsgPublishRate = None,
    byte_publish_rate: BytePublishRate = None,
    msg_dispatch_rate: MsgDispatchRate = None,
    byte_dispatch_rate: ByteDispatchRate = None,
    replication_msg_dispatch_rate: ReplicationMsgRate = None,
    replication_byte_dispatch_rate: ReplicationByteRate = None,
) -> None:
    """Change the rates given; the others keep their value."""
    rates = _rates(
        msg_publish_rate,
        byte_publish_rate,
        msg_dispatch_rate,
        byte_dispatch_rate,
        replication_msg_dispatch_rate,
        replication_byte_dispatch_rate,
    )
    changes = {field: rate for field, rate in rates.items() if rate is not None}
    path = admin_path("resourcegroups", name)
    with connect(ctx) as admin:
        if not changes:
            raise CommandError("Nothing to update: give at least one rate, e.g. -mp 1000.")
        # The server's PUT also creates; a mistyped name must not become a new group.
        admin.checked(admin.send("GET", path))
        admin.write("PUT", path, changes)


@cli.command("delete")
def delete_group(ctx: typer.Context, name: GroupName) -> None:
    """Delete a ResourceGroup that no tenant or namespace uses and that is not the default."""
    with connect(ctx) as admin:
        admin.write("DELETE", admin_path("resourcegroups", name))


Mode = Annotated[
    GroupModeChoice,
    typer.Argument(
        metavar="MODE",
        help="enforce: workers hold rows back to their allocations. observe: they are planned "
        "alike but hold nothing back, recording what enforcing would have done.",
        case_sensitive=False,
    ),
]


@cli.command("get-mode")
def get_mode(ctx: typer.Context, name: GroupName) -> None:
    """Print a ResourceGroup's mode: enforce or observe."""
    with connect(ctx) as admin:
        mode = admin.read(admin_path("resourcegroups", name, "mode"))
        typer.echo(mode["mode"])


@cli.command("set-mode")
def set_mode(ctx: typer.Context, name: GroupName, mode: Mode) -> None:
    """Switch a ResourceGroup between enforce and observe; its workers follow within a second.

    Observe first to roll a quota out: `rgadmin top` then shows what it would hold back."""
    with connect(ctx) as admin:
        admin.write("PUT", admin_path("resourcegroups", name, "mode"), {"mode": mode.value})
