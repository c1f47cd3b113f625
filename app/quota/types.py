"""The shapes usage reporting passes between its modules, and the layout of its figures.

Tuples rather than objects where a report handles thousands of them (a broker reports
5,000 namespaces): they cost less to make, and Python's garbage collector stops looking at
tuples of plain values. Each layout is named here once, so that no module indexes one by
arithmetic of its own.
"""

from __future__ import annotations

from typing import Any

from rgspark.wire import DIMENSIONS

NamespaceKey = tuple[str, str]
"""(tenant, namespace)."""

GroupQuotas = tuple[float | None, ...]
"""Per dimension, in `rgspark.wire.DIMENSIONS` order: the rate the group holds it to, or
None when unlimited (-1 or 0)."""

Rates = tuple[float | None, ...]
"""A reporter's granted rate per dimension for one namespace; None where unlimited."""

Figures = tuple[Any, ...]
"""One reporter's figures for one namespace, flat: per dimension in turn, its usage (per
second), demand and allocation (None when none is in force), as the ``quota_usage`` columns
hold them (`app.quota.repository.sql.FIGURE_COLUMNS`). Read them through the positions below."""

USAGE, DEMAND, ALLOCATION = 0, 1, 2
"""Where each figure is among a dimension's three."""
_PER_DIMENSION = 3

USAGES = tuple(range(USAGE, _PER_DIMENSION * len(DIMENSIONS), _PER_DIMENSION))
"""Where each dimension's usage is in `Figures`, in `rgspark.wire.DIMENSIONS` order."""
DEMANDS = tuple(range(DEMAND, _PER_DIMENSION * len(DIMENSIONS), _PER_DIMENSION))
"""Where each dimension's demand is in `Figures`."""
ALLOCATIONS = tuple(range(ALLOCATION, _PER_DIMENSION * len(DIMENSIONS), _PER_DIMENSION))
"""Where each dimension's allocation is in `Figures`."""
