"""Request and response bodies, with Pulsar's camelCase JSON names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

# Pulsar's name characters, 1-255 of them, but not "." or "..", which clients that
# normalise paths (browsers, curl, proxies) turn into another resource. Without lookaround,
# which neither pydantic's regex engine nor every JSON Schema validator has: a name starts
# with a character other than "."; or it is "." and such a character; or ".." and more.
_CHAR = r"[A-Za-z0-9_\-=:.]"
_NOT_DOT = r"[A-Za-z0-9_\-=:]"
NAME_CHARS = f"(?:{_NOT_DOT}{_CHAR}{{0,254}}|\\.{_NOT_DOT}{_CHAR}{{0,253}}|\\.\\.{_CHAR}{{1,253}})"
NAME_PATTERN = f"^{NAME_CHARS}$"
NAME_RULE = "1-255 ASCII letters, digits and _-=:., but not . or .."

# Roles are token subjects, not Pulsar names: e-mail-like and non-ASCII subjects are common.
# The excluded characters are listed one by one, not as `\s`, whose meaning differs between
# the server's regex engine (Unicode's White_Space, with U+0085) and JSON Schema's
# (ECMAScript's, with U+FEFF but not U+0085): so the spec and the server refuse the same
# roles. Excluded: C0 controls and space, DEL and the C1 controls (U+0085 among them), the
# no-break space, and every other Unicode space or line separator, with U+FEFF.
ROLE_PATTERN = (
    r"^[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]{1,255}$"
)
ROLE_RULE = "1-255 characters without spaces or control characters"

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

ResourceGroupName = Annotated[
    str, Path(pattern=NAME_PATTERN, description=f"ResourceGroup name: {NAME_RULE}")
]
TenantName = Annotated[str, Path(pattern=NAME_PATTERN, description=f"Tenant name: {NAME_RULE}")]
NamespaceName = Annotated[
    str, Path(pattern=NAME_PATTERN, description=f"Namespace name: {NAME_RULE}")
]
RoleName = Annotated[str, Path(pattern=ROLE_PATTERN, description=f"Role: {ROLE_RULE}")]


def _whole(value: float) -> int:
    if not value.is_integer():
        raise PydanticCustomError("whole_number", "Input should be a whole number")
    return int(value)


@dataclass(frozen=True, slots=True)
class WholeNumber:
    """An integer from ``ge`` to ``le``, taking what JSON Schema's ``integer`` takes: integers
    and numbers without a fraction (``5.0``), but no strings or booleans (pydantic's lax
    integers take ``"5"`` and ``true``; its strict ones refuse ``5.0``).

    Integers take the first branch without leaving pydantic's core; the bounds are checked
    after either branch, on the integer, so that ``9.3e18`` is refused by ``le`` exactly.
    """

    ge: int
    le: int

    def __get_pydantic_core_schema__(
        self, _source: Any, _handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        whole_float = core_schema.no_info_after_validator_function(
            _whole, core_schema.float_schema(strict=True, allow_inf_nan=False)
        )
        integer = core_schema.union_schema(
            [core_schema.int_schema(strict=True), whole_float],
            mode="left_to_right",
            custom_error_type="whole_number",
            custom_error_message="Input should be a whole number",
        )
        bounded = core_schema.int_schema(strict=True, ge=self.ge, le=self.le)
        return core_schema.chain_schema([integer, bounded])

    def __get_pydantic_json_schema__(
        self, _schema: core_schema.CoreSchema, _handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "integer", "minimum": self.ge, "maximum": self.le}


_UNLIMITED_DOC = "-1 or 0 means unlimited."
MsgRate = Annotated[int, WholeNumber(ge=-1, le=INT32_MAX)]
ByteRate = Annotated[int, WholeNumber(ge=-1, le=INT64_MAX)]


class _Body(BaseModel):
    # Pulsar rejects what it does not know; a typo must not silently become "unlimited".
    model_config = ConfigDict(extra="forbid")


class ResourceGroupUpdate(_Body):
    """PUT body: omitted or null fields are -1 on create and unchanged on update."""

    publishRateInMsgs: MsgRate | None = Field(
        None, description=f"Messages published per second; {_UNLIMITED_DOC}"
    )
    publishRateInBytes: ByteRate | None = Field(
        None, description=f"Bytes published per second; {_UNLIMITED_DOC}"
    )
    dispatchRateInMsgs: MsgRate | None = Field(
        None, description=f"Messages dispatched per second; {_UNLIMITED_DOC}"
    )
    dispatchRateInBytes: ByteRate | None = Field(
        None, description=f"Bytes dispatched per second; {_UNLIMITED_DOC}"
    )
    replicationDispatchRateInMsgs: MsgRate | None = Field(
        None, description="Stored and returned for compatibility with Pulsar; not enforced."
    )
    replicationDispatchRateInBytes: ByteRate | None = Field(
        None, description="Stored and returned for compatibility with Pulsar; not enforced."
    )


class ResourceGroupRead(BaseModel):
    publishRateInMsgs: int = Field(description=f"Messages published per second; {_UNLIMITED_DOC}")
    publishRateInBytes: int = Field(description=f"Bytes published per second; {_UNLIMITED_DOC}")
    dispatchRateInMsgs: int = Field(description=f"Messages dispatched per second; {_UNLIMITED_DOC}")
    dispatchRateInBytes: int = Field(description=f"Bytes dispatched per second; {_UNLIMITED_DOC}")
    replicationDispatchRateInMsgs: int = Field(description="Not enforced; kept for compatibility.")
    replicationDispatchRateInBytes: int = Field(description="Not enforced; kept for compatibility.")


GroupMode = Literal["enforce", "observe"]
"""`app.models.GROUP_MODES`."""
MODE_DOC = (
    "`enforce`: the group's workers hold rows back to their allocations. `observe`: they are "
    "planned exactly alike (same reports, same allocations) but hold nothing back; they "
    "record what enforcing would have done, and the usage history, `rgadmin top`, the "
    "dashboard and `/metrics` show what it would hold back. Not part of Pulsar's "
    "ResourceGroup, so it is read and written apart, at `/admin/v2/resourcegroups/{rg}/mode`: "
    "the group's own object stays Pulsar's, and a Pulsar client's PUT of it keeps the mode."
)


class ResourceGroupMode(_Body):
    """Whether a group's workers hold back (``enforce``) or only record (``observe``)."""

    mode: GroupMode = Field(description=MODE_DOC)


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Role = Annotated[str, Field(pattern=ROLE_PATTERN)]


class TenantInfo(_Body):
    adminRoles: list[Role] = Field(
        default_factory=list, description="Roles that administer this tenant's namespaces."
    )
    allowedClusters: list[Name] = Field(
        default_factory=list, description="Clusters the tenant may use; stored for compatibility."
    )


AuthAction = Literal["produce", "consume", "functions", "sources", "sinks", "packages"]


GroupSource = Literal["namespace", "tenant", "default"]


class AppliedResourceGroup(BaseModel):
    """The ResourceGroup that applies to a namespace (``?applied=true``): its own, else its
    tenant's, else the default group, else none."""

    resourceGroup: str | None = Field(
        description="The name of the group that applies, or null when none does (unlimited)."
    )
    source: GroupSource | None = Field(
        description="Where it comes from: the namespace's own attachment, its tenant's, or the "
        "default group; null when no group applies."
    )


class AuthPolicies(BaseModel):
    """A namespace's grants, in Pulsar's ``auth_policies`` shape."""

    namespace_auth: dict[str, list[str]] = Field(
        description="The actions each role is granted on the namespace."
    )
    destination_auth: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, description="Per-topic grants: none here (Spark has no topics)."
    )
    subscription_auth_roles: dict[str, list[str]] = Field(
        default_factory=dict, description="Per-subscription roles: none here."
    )


class NamespacePolicies(BaseModel):
    """The subset of Pulsar's namespace ``Policies`` this server keeps, with Pulsar's
    snake_case names, so Pulsar tools that read a namespace's policies work."""

    auth_policies: AuthPolicies
    replication_clusters: list[str] = Field(description="This server's cluster.")
    resource_group_name: str | None = Field(
        description="The namespace's own ResourceGroup, as Pulsar's; null when it has none "
        "(`GET .../resourcegroup?applied=true` says which group applies)."
    )
    deleted: bool = Field(False, description="Always false: deleted namespaces are gone.")


class DimensionHistory(BaseModel):
    """One dimension of a group's usage history: one value per sample, in `times` order."""

    limit: list[int] = Field(description="The group's configured rate; -1 when unlimited.")
    usage: list[float | None] = Field(
        description="Units per second used over the resolution before the sample's moment: "
        "the units the group's reporters reported, counted over the time they were used in "
        "(never a report's own rate). Null while reports covering that time may still "
        "arrive: a steady worker reports a lease's units at once, so about a lease after."
    )
    demand: list[float | None] = Field(
        description="Units per second wanted, summed over reporters; null when some reporter "
        "did not know its demand yet."
    )
    allocation: list[float | None] = Field(
        description="Sum of the rates allocated to the reporters; null when unlimited."
    )

    holdBack: list[float | None] = Field(
        description="The share of the units used that the group's allocations did not cover: "
        "`max(0, usage - allocation) / usage` at each sample, with `usage` and `allocation` as "
        "above. In `observe` mode it is what enforcing would hold back (the workers send "
        "everything and only record it); in `enforce` mode it stays near 0, the workers being "
        "held to their allocations. Null where usage is null or 0, or the dimension unlimited."
    )


class UsageDimensions(BaseModel):
    publishRateInMsgs: DimensionHistory
    publishRateInBytes: DimensionHistory
    dispatchRateInMsgs: DimensionHistory
    dispatchRateInBytes: DimensionHistory


class GroupNamespace(BaseModel):
    """A namespace whose effective group is the group, now."""

    namespace: str = Field(description="`tenant/namespace`.")
    source: GroupSource = Field(description="Where its group comes from.")
    reporters: int = Field(description="Its live reporters (worker processes) now.")


class UsageHistory(BaseModel):
    """A group's usage over time (sums over its live reporters) and its namespaces now."""

    resourceGroup: str
    mode: GroupMode = Field(description=f"The group's mode now. {MODE_DOC}")
    resolutionSeconds: float = Field(description="Seconds between samples.")
    times: list[float] = Field(description="Each sample's moment, in seconds since the epoch.")
    reporters: list[int] = Field(
        description="Reporters alive at each sample: their lease (and its grace) had not run "
        "out, whether or not they reported since."
    )
    dimensions: UsageDimensions
    namespaces: list[GroupNamespace]


MAX_REQUESTS_PER_SECOND = 1_000_000


class RequestQuotaBody(_Body):
    requestsPerSecond: Annotated[int, WholeNumber(ge=1, le=MAX_REQUESTS_PER_SECOND)] = Field(
        description="Requests per second the role may send to each server process."
    )


class RequestQuotasRead(BaseModel):
    default: int | None = Field(description="The quota of every role without its own, or null.")
    roles: dict[str, int] = Field(description="Quotas of roles that have their own.")
