"""What ``rgadmin top`` shows: each group's latest figures, saturated groups first.

The input is the usage history's answer (``GET /admin/v2/resourcegroups/{rg}/usage``): per
dimension, series of ``limit`` (-1 unlimited), ``usage`` (null until complete), ``demand``
(null when unknown) and ``allocation`` (null when unlimited), with ``times`` and
``reporters``, oldest first. Limit, demand, allocation and reporters are the latest
sample's; usage is the latest complete one, counted over the resolution before its moment,
and AGE says how old that is: usage is known only once every report covering its time has
come (a steady worker reports a lease's units at once). MODE is the group's (``enforce`` or
``observe``); in observe mode WOULD_HOLD_BACK is the share of the usage the allocations do
not cover, ``max(0, usage - allocation) / usage`` (the history's ``holdBack``): what
enforcing would hold back of what the workers send.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from rgspark.wire import DIMENSIONS, OBSERVE, RATE_FIELDS

# (field of the usage answer, label, unit) per dimension; the labels are the dimensions'
# names in reports and metrics, and have no blanks, so that `awk` and `sort -k` can read
# the table.
DIMENSION_ROWS = tuple(
    (RATE_FIELDS[name], name, "msgs" if name.endswith("Msgs") else "bytes") for name in DIMENSIONS
)
# A group using this much of a limit is shown as saturated.
SATURATED_PCT = 90.0
BUSY_PCT = 75.0
COLUMNS = (
    "GROUP",
    "DIMENSION",
    "LIMIT",
    "USAGE",
    "USED",
    "DEMAND",
    "ALLOCATION",
    "REPORTERS",
    "AGE",
    "MODE",
    "WOULD_HOLD_BACK",
)


@dataclass(frozen=True)
class DimensionSample:
    label: str
    unit: str
    limit: float  # -1 or 0: unlimited, as in Pulsar
    usage: float | None
    demand: float | None  # None: some reporter's demand was unknown
    allocation: float | None  # None: unlimited
    hold_back: float | None = None  # of the usage, the share the allocations do not cover

    @property
    def used_pct(self) -> float | None:
        """Usage as a percentage of the limit; None when unlimited."""
        if self.limit <= 0 or self.usage is None:
            return None
        return self.usage / self.limit * 100


@dataclass(frozen=True)
class GroupSample:
    group: str
    at: float | None  # epoch seconds of the usage shown; None: no usage complete yet
    reporters: int | None
    dimensions: tuple[DimensionSample, ...]
    mode: str | None = None  # None: a server without modes

    @property
    def saturation(self) -> float | None:
        """The highest usage, as a percentage of its limit, over the limited dimensions."""
        used = [pct for dimension in self.dimensions if (pct := dimension.used_pct) is not None]
        return max(used, default=None)


def latest_sample(group: str, usage: Mapping[str, Any]) -> GroupSample:
    """The last sample of a group's usage history."""
    times: Sequence[float] = usage.get("times") or []
    mode = usage.get("mode")
    if not times:
        return GroupSample(group=group, at=None, reporters=None, dimensions=(), mode=mode)
    reporters: Sequence[int] = usage.get("reporters") or []
    series: Mapping[str, Mapping[str, Sequence[float | None]]] = usage.get("dimensions") or {}
    complete = _last_complete(series)
    dimensions = tuple(
        DimensionSample(
            label=label,
            unit=unit,
            limit=_last(series[field], "limit") or -1,
            usage=None if complete is None else series[field]["usage"][complete],
            demand=_last(series[field], "demand"),
            allocation=_last(series[field], "allocation"),
            hold_back=_at(series[field], "holdBack", complete),
        )
        for field, label, unit in DIMENSION_ROWS
        if field in series
    )
    return GroupSample(
        group=group,
        at=None if complete is None else times[complete],
        reporters=reporters[-1] if reporters else None,
        dimensions=dimensions,
        mode=mode,
    )


def _last(series: Mapping[str, Sequence[float | None]], name: str) -> float | None:
    values = series.get(name) or []
    return values[-1] if values else None


def _at(series: Mapping[str, Sequence[float | None]], name: str, index: int | None) -> float | None:
    values = series.get(name) or []
    return None if index is None or index >= len(values) else values[index]


def _last_complete(series: Mapping[str, Mapping[str, Sequence[float | None]]]) -> int | None:
    """The index of the latest moment whose usage is complete (in every dimension)."""
    usages = [dimension.get("usage") or [] for dimension in series.values()]
    if not usages:
        return None
    for index in range(min(len(usage) for usage in usages) - 1, -1, -1):
        if all(usage[index] is not None for usage in usages):
            return index
    return None


def saturated_first(samples: Iterable[GroupSample]) -> list[GroupSample]:
    """Groups by their highest usage against a limit, highest first; then the groups that have
    no limit or no sample, by name."""
    return sorted(
        samples,
        key=lambda sample: (
            sample.saturation is None,
            -(sample.saturation or 0.0),
            sample.group,
        ),
    )


def rows(samples: Iterable[GroupSample], now: float) -> list[tuple[str, ...]]:
    """The table's rows, one per group and dimension, as text without blanks."""
    table: list[tuple[str, ...]] = []
    for sample in samples:
        if not sample.dimensions:
            # As kubectl shows what is not known yet; a new group's first sample is <= 10 s away.
            table.append(
                (sample.group, *["-"] * (len(COLUMNS) - 4), "<pending>", sample.mode or "-", "-")
            )
            continue
        age = "<pending>" if sample.at is None else _age(now - sample.at)
        reporters = "-" if sample.reporters is None else str(sample.reporters)
        for dimension in sample.dimensions:
            pct = dimension.used_pct
            table.append(
                (
                    sample.group,
                    dimension.label,
                    "unlimited" if dimension.limit <= 0 else _rate(dimension.limit, dimension.unit),
                    _rate(dimension.usage, dimension.unit),
                    "-" if pct is None else f"{pct:.0f}%",
                    "?" if dimension.demand is None else _rate(dimension.demand, dimension.unit),
                    _rate(dimension.allocation, dimension.unit),
                    reporters,
                    age,
                    sample.mode or "-",
                    _would_hold_back(sample, dimension),
                )
            )
    return table


def _would_hold_back(sample: GroupSample, dimension: DimensionSample) -> str:
    """In observe mode, the share of the usage enforcing would hold back; else "-"."""
    if sample.mode != OBSERVE or dimension.hold_back is None:
        return "-"
    return f"{dimension.hold_back * 100:.0f}%"


def plain_table(samples: Iterable[GroupSample], now: float) -> str:
    """The rows as aligned plain text, like ``kubectl top``: no colours, no control codes."""
    lines = [COLUMNS, *rows(samples, now)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(COLUMNS))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def rich_table(samples: Sequence[GroupSample], now: float) -> Table:
    """The rows for a terminal: saturated groups in red, busy ones in yellow."""
    # The modes' columns only while some group observes: a terminal 80 wide holds the rest.
    shown = len(COLUMNS) if any(sample.mode == OBSERVE for sample in samples) else -2
    table = Table(box=None, header_style="bold")
    for column in COLUMNS[:shown]:
        table.add_column(column, no_wrap=True)
    for sample in samples:
        for row in rows([sample], now):
            cells = (Text(cell) for cell in row[:shown])
            table.add_row(*cells, style=_style(sample.saturation))
    return table


def _style(saturation: float | None) -> str:
    if saturation is None:
        return ""
    if saturation >= SATURATED_PCT:
        return "bold red"
    return "yellow" if saturation >= BUSY_PCT else ""


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return _scaled(value, 1024.0, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"))
    return _scaled(value, 1000.0, ("", "k", "M", "G", "T", "P"))


def _scaled(value: float, step: float, units: Sequence[str]) -> str:
    for unit in units[:-1]:
        if abs(value) < step:
            return f"{_number(value)}{unit}"
        value /= step
    return f"{_number(value)}{units[-1]}"


def _number(value: float) -> str:
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}".rstrip("0").rstrip(".")


def _age(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    return f"{minutes}m" if minutes < 120 else f"{minutes // 60}h"
