"""``rgadmin top``: a live view of the groups' limits, usage, demand and allocation."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from app.commands.admin_client import AdminClient, admin_path, connect, reason_of
from app.commands.connection import CommandError
from app.commands.usage_table import (
    SATURATED_PCT,
    GroupSample,
    latest_sample,
    plain_table,
    rich_table,
    saturated_first,
)
from app.reasons import RESOURCE_GROUP_MISSING

# The server samples every 10 s; a minute of history always holds the latest sample.
USAGE_WINDOW_SECONDS = 60


def top(
    ctx: typer.Context,
    groups: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="RESOURCE_GROUP",
            help="Groups to show. Default: every group (needs a superuser token).",
            show_default=False,
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", "-i", min=0.1, help="Seconds between refreshes.")
    ] = 5.0,
) -> None:
    """Show each group's limit, usage, demand and allocation per dimension, and its reporters,
    refreshing like `kubectl top`.

    Saturated groups (usage near or over a limit) come first. Rates are per second, summed
    over the group's live reporters; DEMAND is what they would use unthrottled ("?" while some
    reporter's is unknown). MODE is enforce or observe; in observe mode WOULD_HOLD_BACK is the
    share of the usage enforcing would hold back, max(0, usage - allocation) / usage. Without a
    terminal, or with --once, the table is plain text.
    """
    with connect(ctx) as admin:

        def fetch() -> list[GroupSample]:
            return snapshot(admin, groups or None)

        samples = fetch()  # errors before the first view end the command
        if once:
            _print_once(samples)
        elif sys.stdout.isatty():
            _watch_live(fetch, samples, interval, admin.connection.url)
        else:
            _watch_plain(fetch, samples, interval)


def snapshot(admin: AdminClient, groups: list[str] | None) -> list[GroupSample]:
    """The latest sample of each group, saturated groups first."""
    names = groups if groups is not None else _group_names(admin)
    samples = []
    for name in names:
        response = admin.send(
            "GET",
            admin_path("resourcegroups", name, "usage"),
            params={"since": USAGE_WINDOW_SECONDS},
        )
        if response.status_code == 404:
            if reason_of(response) != RESOURCE_GROUP_MISSING:
                raise CommandError(
                    f"The server at {admin.connection.url} has no usage history "
                    f"(GET {response.request.url.path}: {admin.describe_failure(response)})."
                )
            if groups is None:
                continue  # deleted since it was listed
            raise CommandError(f"{name}: {admin.describe_failure(response)}")
        samples.append(latest_sample(name, admin.body_of(response)))
    return saturated_first(samples)


def _group_names(admin: AdminClient) -> list[str]:
    response = admin.send("GET", admin_path("resourcegroups"))
    if response.status_code == 403:
        raise CommandError(
            f"Listing all ResourceGroups needs a superuser token ({reason_of(response)}); "
            "name the groups to watch: rgadmin top RESOURCE_GROUP..."
        )
    names: list[str] = admin.body_of(response)
    return names


def _print_once(samples: list[GroupSample]) -> None:
    if not samples:
        typer.echo("No ResourceGroups.", err=True)
    elif sys.stdout.isatty():
        Console().print(rich_table(samples, time.time()))
    else:
        typer.echo(plain_table(samples, time.time()))


def _watch_plain(
    fetch: Callable[[], list[GroupSample]], samples: list[GroupSample], interval: float
) -> None:
    """Without a terminal (a pipe, a log file): a plain snapshot every interval, as
    ``top -b`` writes them."""
    try:
        _print_once(samples)
        while True:
            time.sleep(interval)
            try:
                samples = fetch()
            except CommandError as error:
                typer.echo(f"Error: {error}", err=True)
                continue
            typer.echo()
            _print_once(samples)
    except KeyboardInterrupt:
        pass


def _watch_live(
    fetch: Callable[[], list[GroupSample]],
    samples: list[GroupSample],
    interval: float,
    url: str,
) -> None:
    """Redraw the table in place every interval until Ctrl-C. A failed refresh keeps the
    last table, says why above it, and is tried again at the next one."""
    error: str | None = None
    refreshed = time.time()
    console = Console()

    def view() -> Group:
        at = time.strftime("%H:%M:%S", time.localtime(refreshed))
        heading = (
            f"{url}: {len(samples)} groups at {at}, every {interval:g}s; saturated "
            f"(>= {SATURATED_PCT:g}% of a limit) first; Ctrl-C quits"
        )
        parts: list[RenderableType] = [Text(heading, style="dim")]
        if error is not None:
            parts.append(Text(f"Error: {error}", style="bold red"))
        parts.append(rich_table(samples, time.time()) if samples else Text("No ResourceGroups."))
        return Group(*parts)

    try:
        with Live(view(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                try:
                    samples, error, refreshed = fetch(), None, time.time()
                except CommandError as failure:
                    error = str(failure)
                live.update(view(), refresh=True)
    except KeyboardInterrupt:
        pass
