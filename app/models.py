"""The SQL store: resource groups, tenants, namespaces, permissions and attachments.

Names are Pulsar's immutable identifiers, so they are the primary keys, and attachments are
foreign keys on the tenant or namespace row. The database itself then refuses a dangling
attachment: a group cannot be deleted while anything points at it (``RESTRICT``), and an
attachment disappears with its namespace.
"""

from __future__ import annotations

from datetime import datetime

from pydantic.alias_generators import to_snake
from sqlalchemy import (
    JSON,
    TIMESTAMP,
    BigInteger,
    CheckConstraint,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Select,
    String,
    Text,
    cast,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rgspark.wire import DIMENSIONS, ENFORCE, MODES, OBSERVE, RATE_FIELDS

NAME_LENGTH = 255

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


RATE_COLUMNS = (
    "publish_rate_in_msgs",
    "publish_rate_in_bytes",
    "dispatch_rate_in_msgs",
    "dispatch_rate_in_bytes",
    "replication_dispatch_rate_in_msgs",
    "replication_dispatch_rate_in_bytes",
)


GROUP_MODES = MODES
"""How a group's workers treat their allocations (`rgspark.wire.MODES`): hold rows back to
them (``enforce``), or only record what holding back would have done (``observe``, for
rolling a quota out)."""


class ResourceGroup(Base):
    """A named bundle of rate quotas per second; -1 or 0 means unlimited, as in Pulsar."""

    __tablename__ = "resource_groups"
    __table_args__ = (
        *(
            CheckConstraint(f"{column} >= -1", name=f"{column}_not_below_minus_one")
            for column in RATE_COLUMNS
        ),
        CheckConstraint(f"mode IN ('{ENFORCE}', '{OBSERVE}')", name="mode_known"),
    )

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    publish_rate_in_msgs: Mapped[int] = mapped_column(Integer)
    publish_rate_in_bytes: Mapped[int] = mapped_column(BigInteger)
    dispatch_rate_in_msgs: Mapped[int] = mapped_column(Integer)
    dispatch_rate_in_bytes: Mapped[int] = mapped_column(BigInteger)
    replication_dispatch_rate_in_msgs: Mapped[int] = mapped_column(Integer)
    replication_dispatch_rate_in_bytes: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[str] = mapped_column(String(16), server_default=ENFORCE)
    """`GROUP_MODES`: not part of Pulsar's group, so its admin API reads and writes it apart
    (``/admin/v2/resourcegroups/{rg}/mode``), and a Pulsar-shaped PUT keeps it."""


class Tenant(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    admin_roles: Mapped[list[str]] = mapped_column(JSON)
    allowed_clusters: Mapped[list[str]] = mapped_column(JSON)
    resource_group: Mapped[str | None] = mapped_column(
        String(NAME_LENGTH),
        ForeignKey("resource_groups.name", ondelete="RESTRICT"),
        index=True,
    )


class Namespace(Base):
    __tablename__ = "namespaces"

    tenant: Mapped[str] = mapped_column(
        String(NAME_LENGTH),
        ForeignKey("tenants.name", ondelete="RESTRICT"),
        primary_key=True,
    )
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    resource_group: Mapped[str | None] = mapped_column(
        String(NAME_LENGTH),
        ForeignKey("resource_groups.name", ondelete="RESTRICT"),
        index=True,
    )


DEFAULT_GROUP_ROW = 1


class DefaultResourceGroup(Base):
    """The group of every namespace with none of its own or its tenant's (Kafka's default
    quota entity): at most one row, and no row means no default. A foreign key like the
    attachments', so a group cannot be deleted while it is the default."""

    __tablename__ = "default_resource_group"
    __table_args__ = (CheckConstraint(f"id = {DEFAULT_GROUP_ROW}", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    resource_group: Mapped[str] = mapped_column(
        String(NAME_LENGTH), ForeignKey("resource_groups.name", ondelete="RESTRICT")
    )


class NamespacePermission(Base):
    """The actions a role is granted on a namespace, as Pulsar's ``grant-permission`` sets them."""

    __tablename__ = "namespace_permissions"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant", "namespace"],
            ["namespaces.tenant", "namespaces.name"],
            ondelete="CASCADE",
            name="fk_namespace_permissions_namespace_namespaces",
        ),
    )

    tenant: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    role: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    actions: Mapped[list[str]] = mapped_column(JSON)


# A column holding a JSON field (a dimension, a rate) is named after it, in snake case.
#: Each dimension's column prefix (``publish_msgs``), in `rgspark.wire.DIMENSIONS` order.
DIMENSION_COLUMNS = tuple(to_snake(name) for name in DIMENSIONS)
#: The group's rate column that holds each dimension, by the dimension's column prefix.
RATE_COLUMN = {to_snake(name): to_snake(RATE_FIELDS[name]) for name in DIMENSIONS}


class QuotaReporter(Base):
    """An enforcing process (a Spark worker) that reports usage; gone once silent too long.

    Liveness lives here, one row per process, so that a report whose per-namespace figures
    barely moved costs one small write instead of one per namespace.
    """

    __tablename__ = "quota_reporters"

    reporter_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(NAME_LENGTH))
    lease_until: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), index=True)
    """When the reporter is gone unless it reports again: the end of the lease its last
    answer gave, plus two report intervals' grace (`app.quota.leases`)."""
    rows_token: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """Changed, to a new random value, whenever the reporter's usage rows are written: a
    server process that remembers them knows them current while this has not changed."""


class QuotaUsage(Base):
    """A reporter's latest figures for one namespace: per dimension, units per second."""

    __tablename__ = "quota_usage"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant", "namespace"],
            ["namespaces.tenant", "namespaces.name"],
            ondelete="CASCADE",
            name="fk_quota_usage_namespace_namespaces",
        ),
        # The allocator reads every reporter of a group: that is, by namespace.
        Index("ix_quota_usage_namespace", "tenant", "namespace"),
        # A group's summary counts its sums in force again from the rows counted in it.
        Index("ix_quota_usage_resource_group", "resource_group"),
    )

    reporter_id: Mapped[str] = mapped_column(
        String(64),
        ForeignKey("quota_reporters.reporter_id", ondelete="CASCADE"),
        primary_key=True,
    )
    tenant: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    written_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    resource_group: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    """The group the row was last counted in: when the namespace moves, that group's
    other reporters are told (through its marker) that a member left."""
    planned_marker: Mapped[int | None] = mapped_column(BigInteger)
    """The group's marker when the row was last written: while the two are equal, the
    reporter's grants for the namespace stand. A plan that changed nothing writes no row, so
    a process that remembers a later plan compares the group's marker with that."""
    publish_msgs_usage: Mapped[float] = mapped_column(Double)
    publish_msgs_demand: Mapped[float] = mapped_column(Double)
    publish_msgs_allocation: Mapped[float | None] = mapped_column(Double)
    publish_bytes_usage: Mapped[float] = mapped_column(Double)
    publish_bytes_demand: Mapped[float] = mapped_column(Double)
    publish_bytes_allocation: Mapped[float | None] = mapped_column(Double)
    dispatch_msgs_usage: Mapped[float] = mapped_column(Double)
    dispatch_msgs_demand: Mapped[float] = mapped_column(Double)
    dispatch_msgs_allocation: Mapped[float | None] = mapped_column(Double)
    dispatch_bytes_usage: Mapped[float] = mapped_column(Double)
    dispatch_bytes_demand: Mapped[float] = mapped_column(Double)
    dispatch_bytes_allocation: Mapped[float | None] = mapped_column(Double)


class QuotaGroup(Base):
    """A group's change marker for quota sharing: a new random value whenever something
    changes that may change a reporter's grant (a reporter's figures, a fall of its
    allocation, a reporter gone; a rise only takes headroom, and moves none). A reporter
    whose group's marker is the one it last planned under needs no new plan."""

    __tablename__ = "quota_groups"

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    marker: Mapped[int] = mapped_column(BigInteger)
    changed_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), index=True)
    """When the marker last changed: reporters ask for the markers changed since they last
    looked, which is none at all in a steady state."""
    wake: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """Moved when the group's fair shares moved enough that reporters holding a lease should
    learn theirs now (`app.quota.leases`): workers watch it through ``/quota/v1/changes``."""
    levels: Mapped[str | None] = mapped_column(Text)
    """The JSON of the group's last summary (`app.quota.levels`): per dimension, what every
    grant needs to know of all the group's reporters, so that a grant reads one row."""
    publish_msgs_in_force: Mapped[float] = mapped_column(Double, server_default="0")
    """The sum of the allocations in force in the group, per dimension: what a grant's
    headroom is computed from (see `app.quota.store`)."""
    publish_bytes_in_force: Mapped[float] = mapped_column(Double, server_default="0")
    dispatch_msgs_in_force: Mapped[float] = mapped_column(Double, server_default="0")
    dispatch_bytes_in_force: Mapped[float] = mapped_column(Double, server_default="0")


class UsageSample(Base):
    """A group's figures from one moment on, for its usage history: per dimension, its
    configured rate, and the sums over the rows of its reporters alive at the moment of
    their demand and allocation (units per second; the demand is None when some reporter did
    not know its own). A group gets a sample only at the moments its figures changed: each
    holds until the next. What the group used is counted apart (`UsageCount`)."""

    __tablename__ = "usage_samples"

    resource_group: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(
        TIMESTAMP(timezone=True), primary_key=True, index=True
    )
    reporters: Mapped[int] = mapped_column(Integer)
    publish_msgs_limit: Mapped[int] = mapped_column(BigInteger)
    publish_msgs_demand: Mapped[float | None] = mapped_column(Double)
    publish_msgs_allocation: Mapped[float] = mapped_column(Double)
    publish_bytes_limit: Mapped[int] = mapped_column(BigInteger)
    publish_bytes_demand: Mapped[float | None] = mapped_column(Double)
    publish_bytes_allocation: Mapped[float] = mapped_column(Double)
    dispatch_msgs_limit: Mapped[int] = mapped_column(BigInteger)
    dispatch_msgs_demand: Mapped[float | None] = mapped_column(Double)
    dispatch_msgs_allocation: Mapped[float] = mapped_column(Double)
    dispatch_bytes_limit: Mapped[int] = mapped_column(BigInteger)
    dispatch_bytes_demand: Mapped[float | None] = mapped_column(Double)
    dispatch_bytes_allocation: Mapped[float] = mapped_column(Double)


class UsageCount(Base):
    """The units a group's reporters used in one bucket of the history's resolution, as one
    server process counted them (`app.quota.counts`): the group's usage there is the sum
    over processes. Written once the bucket is complete, so a process writes each row once."""

    __tablename__ = "usage_counts"
    __table_args__ = (Index("ix_usage_counts_moment", "moment"),)

    resource_group: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    moment: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), primary_key=True)
    """When the bucket starts."""
    writer: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    """The server process that counted the units (random, one per process)."""
    publish_msgs_used: Mapped[float] = mapped_column(Double)
    publish_bytes_used: Mapped[float] = mapped_column(Double)
    dispatch_msgs_used: Mapped[float] = mapped_column(Double)
    dispatch_bytes_used: Mapped[float] = mapped_column(Double)


USAGE_SAMPLING_ROW = 1


class UsageSampling(Base):
    """When usage was last sampled, and under which admin generation: the server process
    that moves it forward takes the sample, so several processes take each one once."""

    __tablename__ = "usage_sampling"
    __table_args__ = (CheckConstraint(f"id = {USAGE_SAMPLING_ROW}", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    sampled_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    admin_generation: Mapped[int] = mapped_column(BigInteger)


class AdminChanges(Base):
    """Counts of writes to groups, tenants, namespaces, namespace permissions and the default
    group, kept by database triggers (so that no write can forget them, whichever path it
    takes): their sum is the **admin generation**, which server processes hold their memory
    of namespaces' groups, of who may report for them and of group reads against
    (`admin_generation`).

    One row per writer: on PostgreSQL the backend process of the writing connection, which
    runs one transaction at a time, so no two concurrent writes ever wait for the same row
    (a single row did: every admin write queued for it, and deadlocked with the group rows
    it locks); on SQLite, where writers take turns anyway, one row. Each change adds a
    random positive amount, so the sum rises with every committed write and, even after rows
    are deleted by hand, all but never comes back to an earlier value.
    """

    __tablename__ = "admin_changes"

    writer: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    changes: Mapped[int] = mapped_column(BigInteger)


COMPACTED_WRITER = 0
"""The row that writers' rows are folded into once their backends are gone (PostgreSQL),
and the single row on SQLite."""


def admin_generation() -> Select[int]:
    """The admin generation: it changes with every committed write to groups, tenants,
    namespaces, namespace permissions and the default group, and only then."""
    return select(cast(func.coalesce(func.sum(AdminChanges.changes), 0), BigInteger))


class ResourceGroupChange(Base):
    """Groups whose reading (rates, and who may read them) a write may have changed, in
    commit order: SQLite's triggers log them, so that a server process drops just those
    groups from its read cache (`app.readcache`). Only the latest entries are kept."""

    __tablename__ = "resource_group_changes"
    __table_args__ = ({"sqlite_autoincrement": True},)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    resource_group: Mapped[str] = mapped_column(String(NAME_LENGTH))


class RequestQuota(Base):
    """Requests per second a role may send to one server process (Kafka's request quota).

    The row with the empty role holds the default for every role without its own; roles
    are never empty, so it cannot collide with one.
    """

    __tablename__ = "request_quotas"
    __table_args__ = (
        CheckConstraint("requests_per_second > 0", name="requests_per_second_positive"),
    )

    role: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    requests_per_second: Mapped[int] = mapped_column(Integer)


class JobFigure(Base):
    """What a job's tasks moved through the throttle under one role and kind (``publish`` or
    ``dispatch``), summed over every post of its workers (``/quota/v1/jobs/{jobId}/figures``):
    the figures a Spark Connect session, which has no accumulators, reads back on its driver.
    Posts add to the row in one statement, so that workers posting at the same instant to
    several server processes never lose one another's figures. Deleted once not updated for
    ``RG_JOB_FIGURES_RETENTION_SECONDS``, with its actions."""

    __tablename__ = "job_figures"

    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    role: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    rows: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    held_s: Mapped[float] = mapped_column(Double)
    """Seconds tasks were held back, summed over tasks."""
    pushbacks: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """Times the destination pushed back on the tasks (a default for rows of before)."""
    pushback_s: Mapped[float] = mapped_column(Double, server_default="0")
    """Seconds those pushbacks cost, summed over tasks."""
    updated_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), index=True)


class JobAction(Base):
    """One action's share of a `JobFigure` (a Spark action, a streaming query's micro-batch):
    only the latest actions by start are kept, while the totals count every one."""

    __tablename__ = "job_actions"
    __table_args__ = (
        ForeignKeyConstraint(
            ["job_id", "role", "kind"],
            ["job_figures.job_id", "job_figures.role", "job_figures.kind"],
            ondelete="CASCADE",
            name="fk_job_actions_job_figures",
        ),
    )

    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    role: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    action: Mapped[str] = mapped_column(String(128), primary_key=True)
    rows: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    held_s: Mapped[float] = mapped_column(Double)
    pushbacks: Mapped[int] = mapped_column(BigInteger, server_default="0")
    pushback_s: Mapped[float] = mapped_column(Double, server_default="0")
    started_ms: Mapped[int] = mapped_column(BigInteger)
    """When the action's first task charged, in milliseconds since the epoch (the earliest)."""
    ended_ms: Mapped[int] = mapped_column(BigInteger)
    """When its last task released (the latest)."""
