"""What the statements of the repository's modules share: sets of keys, inserts, the figure
columns, and arrays sent in their binary form.

On PostgreSQL a set of keys is two array parameters however many there are; SQLite gets one
parameter per value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import adapters
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import ColumnElement, String, any_, bindparam, func, select, tuple_
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from app.models import DIMENSION_COLUMNS
from app.quota.types import NamespaceKey

#: The ``quota_usage`` columns that hold `app.quota.types.Figures`, in its order.
FIGURE_COLUMNS = tuple(
    f"{dim}_{part}" for dim in DIMENSION_COLUMNS for part in ("usage", "demand", "allocation")
)


class _Array(list[Any]):
    """Values the driver sends to PostgreSQL as an array in its binary form: a report's
    statements over arrays (`app.quota.repository.rows`' upsert and the like) pass thousands
    of values each, which the text form has the driver write out (and summaries' quotes
    escape) one by one, in Python. One type per array (floats are never mixed with ints)."""


adapters.register_dumper(_Array, ListBinaryDumper)


def insert(postgresql: bool, table: Any) -> Any:
    """An INSERT of the dialect's, which can say ON CONFLICT."""
    return pg.insert(table) if postgresql else sqlite.insert(table)


def among(postgresql: bool, column: Any, name: str) -> ColumnElement[bool]:
    """``column`` is one of the values of parameter ``name``."""
    if postgresql:
        condition: ColumnElement[bool] = column == any_(bindparam(name, type_=pg.ARRAY(String)))
        return condition
    return column.in_(bindparam(name, expanding=True))  # type: ignore[no-any-return]


def pairs() -> Any:
    """On PostgreSQL, the keys as a table of (tenant, name)."""
    return (
        func.unnest(
            bindparam("tenants", type_=pg.ARRAY(String)),
            bindparam("names", type_=pg.ARRAY(String)),
        )
        .table_valued("tenant", "name")
        .render_derived()
    )


def keys_in(postgresql: bool, tenant: Any, name: Any) -> ColumnElement[bool]:
    """(``tenant``, ``name``) is one of the keys (`key_parameters`)."""
    if postgresql:
        given = pairs()
        return tuple_(tenant, name).in_(select(given.c.tenant, given.c.name))
    return tuple_(tenant, name).in_(bindparam("keys", expanding=True))


def key_parameters(postgresql: bool, given: Sequence[NamespaceKey]) -> dict[str, Any]:
    """The parameters that a set of namespace keys takes."""
    if postgresql:
        return {"tenants": [key[0] for key in given], "names": [key[1] for key in given]}
    return {"keys": list(given)}
