"""ResourceGroups: create, update with Pulsar's merge rule, read, delete."""

from __future__ import annotations

from sqlalchemy import delete, exists, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import ResourceGroupInUse, ResourceGroupNotFound
from app.models import (
    RATE_COLUMNS,
    DefaultResourceGroup,
    Namespace,
    ResourceGroup,
    Tenant,
)
from app.schemas import GroupMode, ResourceGroupMode, ResourceGroupRead, ResourceGroupUpdate
from app.services._sql import insert
from app.services.attachments import tenant_uses
from rgspark.wire import OBSERVE

UNLIMITED_RATE = -1  # a configured rate that limits nothing, as Pulsar writes it

# JSON field name -> column name; the model's fields are Pulsar's camelCase names.
_COLUMN_OF = dict(zip(ResourceGroupUpdate.model_fields, RATE_COLUMNS, strict=True))


def to_read(group: ResourceGroup) -> ResourceGroupRead:
    return ResourceGroupRead(
        publishRateInMsgs=group.publish_rate_in_msgs,
        publishRateInBytes=group.publish_rate_in_bytes,
        dispatchRateInMsgs=group.dispatch_rate_in_msgs,
        dispatchRateInBytes=group.dispatch_rate_in_bytes,
        replicationDispatchRateInMsgs=group.replication_dispatch_rate_in_msgs,
        replicationDispatchRateInBytes=group.replication_dispatch_rate_in_bytes,
    )


def find(session: Session, name: str) -> ResourceGroup | None:
    return session.get(ResourceGroup, name)


def get(session: Session, name: str) -> ResourceGroup:
    group = find(session, name)
    if group is None:
        raise ResourceGroupNotFound
    return group


def list_names(session: Session) -> list[str]:
    return list(session.scalars(select(ResourceGroup.name).order_by(ResourceGroup.name)))


def upsert(session: Session, name: str, body: ResourceGroupUpdate) -> None:
    """Create with omitted fields unlimited, or update only the fields given.

    Inserting the all-unlimited row first (a no-op when it exists) and then setting the given
    fields in one UPDATE makes both cases one code path, and concurrent PUTs never lose each
    other's fields: there is no read-modify-write.
    """
    session.execute(
        insert(session, ResourceGroup)
        .values(name=name, **dict.fromkeys(RATE_COLUMNS, UNLIMITED_RATE))
        .on_conflict_do_nothing()
    )
    changes = {
        _COLUMN_OF[field]: value for field, value in body.model_dump(exclude_none=True).items()
    }
    if changes:
        session.execute(update(ResourceGroup).where(ResourceGroup.name == name).values(changes))


def get_mode(session: Session, name: str) -> ResourceGroupMode:
    mode = session.scalar(select(ResourceGroup.mode).where(ResourceGroup.name == name))
    if mode is None:
        raise ResourceGroupNotFound
    return ResourceGroupMode(mode=mode)


def set_mode(session: Session, name: str, mode: GroupMode) -> None:
    """Set an existing group's mode. The write moves the admin generation (its triggers), so
    the group's workers, which watch it, report at once and learn the mode from the answer."""
    updated = session.execute(
        update(ResourceGroup).where(ResourceGroup.name == name).values(mode=mode)
    )
    if updated.rowcount == 0:  # type: ignore[attr-defined]
        raise ResourceGroupNotFound


def observing(session: Session) -> list[str]:
    """The groups in observe mode, by name."""
    query = select(ResourceGroup.name).where(ResourceGroup.mode == OBSERVE)
    return list(session.scalars(query.order_by(ResourceGroup.name)))


def readers(session: Session, name: str) -> frozenset[str]:
    """Admin roles of the tenants using a group (directly, through a namespace, or as the
    default group of some of their namespaces)."""
    using = select(Tenant.admin_roles).where(tenant_uses(name))
    return frozenset(role for roles in session.scalars(using) for role in roles)


def is_in_use(session: Session, name: str) -> bool:
    return bool(
        session.scalar(
            select(
                or_(
                    exists().where(Tenant.resource_group == name),
                    exists().where(Namespace.resource_group == name),
                    exists().where(DefaultResourceGroup.resource_group == name),
                )
            )
        )
    )


def remove(session: Session, name: str) -> None:
    get(session, name)
    if is_in_use(session, name):
        raise ResourceGroupInUse
    try:
        session.execute(delete(ResourceGroup).where(ResourceGroup.name == name))
    except IntegrityError as exc:
        # An attachment committed between the check and the delete: the foreign key caught it.
        raise ResourceGroupInUse from exc
