"""Usage reports and the allocations that answer them."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict

from app.schemas import MODE_DOC, NAME_CHARS, GroupMode, ResourceGroupRead, WholeNumber
from rgspark.wire import (
    KEPT_ACTIONS,
    MAX_ACTIONS_PER_POST,
    UNKNOWN_DEMAND,
    UNLIMITED_ALLOCATION,
)

REPORTER_ID_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
NAMESPACE_REF_PATTERN = f"^{NAME_CHARS}/{NAME_CHARS}$"
#: The most seconds a report's ``sentAtMs`` may be ahead of the server's clock: clocks of
#: hosts kept by NTP differ by far less.
MAX_CLOCK_AHEAD_S = 60.0
#: A group watched on the changes endpoint: ``WAKE:NAME``, the wake last seen (none: empty).
WATCHED_GROUP_PATTERN = f"^[0-9]{{0,19}}:{NAME_CHARS}$"
WATCHED_GROUP_RULE = "WAKE:NAME with a group's name and the wake last seen (:NAME for none)"
MAX_NAMESPACES_PER_REPORT = 10_000
MAX_USED = 2**63 - 1
#: The id of a Spark action (or a streaming query's micro-batch) in a job's figures, as
#: rgspark's tasks name it (``sql:3``).
ACTION_ID_PATTERN = r"^[A-Za-z0-9:._-]{1,128}$"
#: The most a post says of one figure: integers JavaScript's numbers hold exactly.
MAX_FIGURE = 2**53
FigureKind = Literal["publish", "dispatch"]
"""Which figures of a job: what its `throttle(df, client, kind)` calls moved."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A report carries up to 10,000 namespaces of four dimensions each: as TypedDicts they
# validate three times faster than as models, with the same JSON schema and errors.
@with_config(ConfigDict(extra="forbid"))
class DimensionUsage(TypedDict):
    used: Annotated[
        int,
        WholeNumber(ge=0, le=MAX_USED),
        Field(description="Units consumed since the reporter's previous report."),
    ]
    demand: Annotated[
        float,
        Field(
            ge=0,
            le=UNKNOWN_DEMAND,
            allow_inf_nan=False,
            strict=True,
            description="Units per second it would have used unthrottled: usage plus what it was "
            "held back from.",
        ),
    ]
    allocation: NotRequired[
        Annotated[
            float,
            Field(
                ge=UNLIMITED_ALLOCATION,
                allow_inf_nan=False,
                strict=True,
                description="The rate it enforces as it sends this (the last allocation it "
                "applied; -1 unlimited). An allocation that fell counts in force at its old "
                "rate until a report says the new one is applied; without this field, from "
                "the moment it is granted.",
            ),
        ]
    ]


@with_config(ConfigDict(extra="forbid"))
class NamespaceUsage(TypedDict, total=False):
    """Per dimension; an omitted dimension is one this reporter does not use."""

    publishMsgs: DimensionUsage | None
    publishBytes: DimensionUsage | None
    dispatchMsgs: DimensionUsage | None
    dispatchBytes: DimensionUsage | None


class UsageReport(_Body):
    sentAtMs: Annotated[int, WholeNumber(ge=0, le=2**53)] = Field(
        description="When the reporter sent this, in milliseconds since the epoch; a report "
        "older than two report intervals on arrival is not stored, and one stamped more than "
        f"{MAX_CLOCK_AHEAD_S:g} s after the server's clock is refused (400): the reporter's "
        "clock is wrong, and a report from the future would never count as old."
    )
    intervalMs: Annotated[int, WholeNumber(ge=1, le=86_400_000)] = Field(
        description="Milliseconds covered by `used`: the time since the previous report."
    )
    namespaces: dict[Annotated[str, Field(pattern=NAMESPACE_REF_PATTERN)], NamespaceUsage] = Field(
        max_length=MAX_NAMESPACES_PER_REPORT,
        description="Usage per namespace this reporter serves, keyed `tenant/namespace`.",
        # A key the pattern refuses is refused, in the spec as by the server.
        json_schema_extra={"additionalProperties": False},
    )


class NamespaceAllocation(BaseModel):
    resourceGroup: str | None = Field(
        description="The effective group: the namespace's own, else its tenant's, else null."
    )
    limits: ResourceGroupRead | None = Field(description="The effective group's configured rates.")
    allocations: dict[str, float] = Field(
        description="This reporter's rate per dimension, per second; -1 means unlimited."
    )
    fallbackAllocations: dict[str, float] = Field(
        description="Its max-min fair share of the group per dimension (-1 unlimited), given "
        "every reporter's demand as last reported: what it holds once the server has been "
        "unreachable past its lease and two report intervals, when the server counts it "
        "gone. Every "
        "reporter's add up to the group's rate at most."
    )
    mode: GroupMode = Field(
        "enforce",
        description="What the worker does with its allocations: hold rows back to them "
        "(`enforce`), or send unheld and record what holding back would have done "
        f"(`observe`); `enforce` where no group applies. {MODE_DOC}",
    )


class ReportResult(BaseModel):
    accepted: bool = Field(
        description="False when the report arrived too old to count; allocations still apply."
    )
    reportIntervalMs: int = Field(description="Report again this many milliseconds from now.")
    reportPeriodMs: int = Field(
        description="The server's report interval, in milliseconds: how often a settling "
        "reporter reports (`reportIntervalMs` is shorter while it waits for headroom)."
    )
    leaseMs: int = Field(
        description="How long this answer holds, in milliseconds: one report interval while "
        "the reporter settles, longer once it is steady (changes to its share are pushed "
        "through `/quota/v1/changes` meanwhile). The reporter is counted gone, and should "
        "fall back, two report intervals after its lease ran out."
    )
    confirmFalls: bool = Field(
        True,
        description="Say in each report the rate you enforce per dimension (`allocation`): "
        "this server counts an allocation that fell in force at its old rate until a report "
        "says the new one is applied.",
    )
    namespaces: dict[str, NamespaceAllocation]


class NamespacePolicy(BaseModel):
    resourceGroup: str | None = Field(description="The namespace's effective group, or null.")
    limits: ResourceGroupRead | None = Field(description="The effective group's configured rates.")
    reportIntervalMs: int = Field(description="How often reporters of this server report.")
    mode: GroupMode = Field(
        "enforce",
        description="The effective group's mode (`enforce` where none applies). " + MODE_DOC,
    )


class AdminChanges(BaseModel):
    generation: int = Field(
        description="The admin generation: it changes with every change to groups, tenants, "
        "namespaces and the default group. Pass it back as `after` to wait for the next."
    )
    groups: dict[str, int] | None = Field(
        None,
        description="The wake of each group asked about (`group`): it moves when the group's "
        "shares moved enough that its reporters should report now. Pass each back as "
        "`group=WAKE:NAME` to wait for the next.",
    )


_MS = "in milliseconds since the epoch"
_PUSHBACK_DEFAULT = "0 when left out."


class ActionFigures(_Body):
    """What some of an action's tasks moved through the throttle."""

    rows: Annotated[int, WholeNumber(ge=0, le=MAX_FIGURE)] = Field(description="Rows charged.")
    bytes: Annotated[int, WholeNumber(ge=0, le=MAX_FIGURE)] = Field(
        description="Bytes charged (Arrow bytes, or what a sink's size says)."
    )
    heldS: float = Field(
        ge=0,
        allow_inf_nan=False,
        strict=True,
        description="Seconds the tasks were held back, summed over tasks.",
    )
    startMs: Annotated[int, WholeNumber(ge=0, le=MAX_FIGURE)] = Field(
        description=f"When the first of these tasks charged, {_MS}."
    )
    endMs: Annotated[int, WholeNumber(ge=0, le=MAX_FIGURE)] = Field(
        description=f"When the last of them released, {_MS}: not before `startMs`."
    )
    pushbacks: Annotated[int, WholeNumber(ge=0, le=MAX_FIGURE)] = Field(
        default=0,
        description=f"Times the destination pushed back on the tasks. {_PUSHBACK_DEFAULT}",
    )
    pushbackS: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        strict=True,
        description=f"Seconds those pushbacks cost, summed over tasks. {_PUSHBACK_DEFAULT}",
    )

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> ActionFigures:
        if self.endMs < self.startMs:
            raise ValueError(f"endMs {self.endMs} is before startMs {self.startMs}")
        return self


class JobFiguresReport(_Body):
    namespace: str = Field(
        pattern=NAMESPACE_REF_PATTERN,
        description="The namespace the job's traffic counts against, `tenant/namespace`: the "
        "caller's role must be allowed to report for it.",
    )
    kind: FigureKind = Field(description="Which figures: those of `publish` or `dispatch`.")
    actions: dict[Annotated[str, Field(pattern=ACTION_ID_PATTERN)], ActionFigures] = Field(
        min_length=1,
        max_length=MAX_ACTIONS_PER_POST,
        description="What the tasks moved since the last post, per action id; added to what "
        "the server holds for the job.",
        # A key the pattern refuses is refused, in the spec as by the server.
        json_schema_extra={"additionalProperties": False},
    )


class ActionFiguresRead(BaseModel):
    rows: int = Field(description="Rows charged.")
    bytes: int = Field(description="Bytes charged.")
    heldS: float = Field(description="Seconds tasks were held back, summed over tasks.")
    pushbacks: int = Field(default=0, description="Times the destination pushed back on tasks.")
    pushbackS: float = Field(default=0.0, description="Seconds those pushbacks cost, summed.")
    startMs: int = Field(description=f"When its first task charged, {_MS}.")
    endMs: int = Field(description=f"When its last task released, {_MS}.")


class JobFiguresRead(BaseModel):
    kind: FigureKind = Field(description="Which figures.")
    rows: int = Field(description="Rows charged over every action.")
    bytes: int = Field(description="Bytes charged over every action.")
    heldS: float = Field(description="Seconds tasks were held back, over every action.")
    pushbacks: int = Field(
        default=0, description="Times the destination pushed back on tasks, over every action."
    )
    pushbackS: float = Field(
        default=0.0, description="Seconds those pushbacks cost, over every action."
    )
    actions: dict[str, ActionFiguresRead] = Field(
        description=f"The latest actions by start ({KEPT_ACTIONS} per role; the totals count "
        "the older ones too), by action id."
    )
