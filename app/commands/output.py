"""What the server commands print, as pulsar-admin prints it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import typer


def show(value: Any) -> None:
    """A name as it is; anything else (objects, lists, null) as indented JSON."""
    if isinstance(value, str):
        typer.echo(value)
    else:
        typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def show_names(names: Iterable[str]) -> None:
    """One name a line, for scripts (``for rg in $(rgadmin resourcegroups list)``)."""
    for name in names:
        typer.echo(name)


def split_list(values: list[str] | None) -> list[str] | None:
    """``-r a,b -r c`` as ``[a, b, c]``: comma separated, as pulsar-admin takes lists, and
    repeatable; None when the option was not given."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]
