"""``rgadmin check``: the rules judged on rows made by hand, then the command on a store
that real reports filled (both databases), before and after it is corrupted by hand."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    func,
    insert,
    make_url,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError
from typer.testing import CliRunner, Result

from app.cli import cli
from app.config import get_settings
from app.db import migrations_directory, sqlalchemy_url, upgrade_schema
from app.models import QuotaGroup, QuotaReporter, RequestQuota
from app.quota.check import (
    Attachment,
    CountedRow,
    GroupInForce,
    Snapshot,
    Violation,
    find_violations,
)
from app.quota.snapshot import reading
from tests.app.test_quota_reports import report
from tests.check import assert_store_consistent
from tests.conftest import SUPERUSER
from tests.factories import (
    FakeClock,
    create_group,
    create_namespace,
    create_tenant,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
UNLIMITED = (None, None, None, None)


def counted(
    reporter: str,
    allocations: tuple[float | None, ...],
    *,
    group: str = "rg",
    namespace: str = "ns",
    lease_until: datetime | None = AT,
) -> CountedRow:
    return CountedRow(group, reporter, "t", namespace, allocations, lease_until)


def snapshot(
    groups: list[GroupInForce],
    rows: list[CountedRow],
    attachments: list[Attachment] | None = None,
    names: frozenset[str] = frozenset({"rg"}),
) -> Snapshot:
    return Snapshot(AT, groups, rows, attachments or [], names)


def in_force(
    *sums: float,
    limits: tuple[float | None, ...] = (1000.0, None, None, 10.0),
    summarized: tuple[float | None, ...] | None = None,
) -> list[GroupInForce]:
    """Group ``rg``'s row, its summary made for its limits unless ``summarized`` says."""
    return [GroupInForce("rg", sums, limits, limits if summarized is None else summarized)]


class TestSumsInForce:
    def test_equal_to_the_allocations_counted_with_none_as_zero(self) -> None:
        rows = [counted("a", (400.0, None, None, None)), counted("b", (600.0, None, None, 0.0))]
        assert find_violations(snapshot(in_force(1000.0, 0.0, 0.0, 0.0), rows), 1.0) == []

    def test_a_sum_off_names_the_group_the_dimension_and_both_figures(self) -> None:
        rows = [counted("a", (400.0, None, None, None)), counted("b", (600.0, None, None, None))]
        found = find_violations(snapshot(in_force(1000.5, 0.0, 0.0, 0.0), rows), 1.0)
        assert found == [
            Violation(
                "group rg",
                "publish_msgs_in_force is 1000.5, expected 1000.0 "
                "(the allocations of the 2 rows counted in it)",
            )
        ]

    def test_rows_of_other_groups_are_not_counted(self) -> None:
        rows = [counted("a", (400.0, None, None, None)), counted("b", (600.0,) * 4, group="x")]
        assert find_violations(snapshot(in_force(400.0, 0.0, 0.0, 0.0), rows), 1.0) == []
        found = find_violations(snapshot(in_force(1000.0, 0.0, 0.0, 0.0), rows), 1.0)
        assert [violation.subject for violation in found] == ["group rg"]

    def test_a_group_without_rows_has_nothing_in_force(self) -> None:
        assert find_violations(snapshot(in_force(0.0, 0.0, 0.0, 0.0), []), 1.0) == []
        found = find_violations(snapshot(in_force(0.0, 0.0, 0.0, 3.0), []), 1.0)
        assert len(found) == 1
        assert "dispatch_bytes_in_force is 3.0, expected 0.0" in found[0].problem

    def test_only_where_a_grant_reads_it(self) -> None:
        rows = [counted("a", (None, None, None, None))]
        # Where the group limits nothing, rows hold None and the sum is left as it was.
        stale = in_force(0.0, 0.0, 7.0, 0.0, limits=(1000.0, None, None, None))
        assert find_violations(snapshot(stale, rows), 1.0) == []
        # A summary made for another limit, or none, is made anew and the sum counted again.
        relimited = in_force(700.0, 0.0, 0.0, 0.0, summarized=(500.0, None, None, 10.0))
        assert find_violations(snapshot(relimited, rows), 1.0) == []
        unsummarized = in_force(700.0, 0.0, 0.0, 0.0, summarized=UNLIMITED)
        assert find_violations(snapshot(unsummarized, rows), 1.0) == []
        read = in_force(700.0, 0.0, 0.0, 0.0)
        assert len(find_violations(snapshot(read, rows), 1.0)) == 1

    def test_floating_point_noise_is_tolerated_within_the_limits_scale(self) -> None:
        rows = [counted("a", (0.1, 5e8, 0.1, None)), counted("b", (0.2, 5e8, 0.2, None))]
        # Sums moved by many grants: a few units in the last place of the rates they added.
        noisy = in_force(0.1 + 0.2, 1e9 + 1e-3, 0.30000000001, 1e-7, limits=(1e3, 1e9, 1.0, 1.0))
        assert find_violations(snapshot(noisy, rows), 1.0) == []
        # Not beyond it: a thousandth of a unit left where nothing is counted, under a limit of 1.
        off = in_force(0.3, 1e9, 0.3, 1e-3, limits=(1e3, 1e9, 1.0, 1.0))
        assert len(find_violations(snapshot(off, rows), 1.0)) == 1


class TestGoneReporters:
    def test_gone_is_two_intervals_past_the_lease(self) -> None:
        groups = in_force(100.0, 0.0, 0.0, 0.0)
        for interval_s, lease_until, gone in (
            (1.0, AT - timedelta(seconds=2), False),
            (1.0, AT - timedelta(seconds=2, microseconds=1), True),
            (10.0, AT - timedelta(seconds=15), False),
            (10.0, AT - timedelta(seconds=21), True),
        ):
            rows = [counted("a", (100.0, None, None, None), lease_until=lease_until)]
            found = find_violations(snapshot(groups, rows), interval_s)
            assert bool(found) is gone, (interval_s, lease_until)

    def test_one_line_per_group_and_reporter(self) -> None:
        old = AT - timedelta(hours=1)
        rows = [
            counted("a", (20.0, None, None, None), namespace=f"ns{i}", lease_until=old)
            for i in range(5)
        ]
        found = find_violations(snapshot(in_force(100.0, 0.0, 0.0, 0.0), rows), 1.0)
        assert found == [
            Violation(
                "group rg",
                "5 rows (t/ns0, t/ns1, t/ns2, ...) of reporter a, whose lease ran out at "
                "2025-12-31T23:00:00+00:00 (3600 s ago), are counted in it, expected none",
            )
        ]

    def test_a_reporter_without_its_row_is_gone(self) -> None:
        rows = [counted("a", (100.0, None, None, None), lease_until=None)]
        found = find_violations(snapshot(in_force(100.0, 0.0, 0.0, 0.0), rows), 1.0)
        assert len(found) == 1
        assert "reporter a, which has no quota_reporters row" in found[0].problem


def test_attachments_name_existing_groups() -> None:
    attachments = [
        Attachment("namespace", "t/ns", "rg"),
        Attachment("namespace", "t/lost", "gone"),
        Attachment("tenant", "t", "rg"),
        Attachment("tenant", "u", "gone"),
        Attachment("default", "", "gone"),
    ]
    found = find_violations(snapshot([], [], attachments), 1.0)
    assert [str(violation) for violation in found] == [
        "default resource group: attached to group gone, which does not exist "
        "(expected a resource_groups row)",
        "namespace t/lost: attached to group gone, which does not exist "
        "(expected a resource_groups row)",
        "tenant u: attached to group gone, which does not exist (expected a resource_groups row)",
    ]


# The command, on stores that real reports filled.


@pytest.fixture
def clock() -> FakeClock:
    """The servers' clock on the real time: the command judges leases by the real one."""
    return FakeClock(time.time())


def rgadmin_check(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.setenv("RG_DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["check"])
    finally:
        get_settings.cache_clear()
    # Exited, one way or another: never an exception out of the command.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def body(clock: FakeClock, demand: float, enforced: float | None = None) -> dict[str, Any]:
    msgs: dict[str, float] = {"used": round(demand), "demand": demand}
    if enforced is not None:
        msgs["allocation"] = enforced  # as rgspark says what it enforces
    return {
        "sentAtMs": clock.ms(),
        "intervalMs": 1000,
        "namespaces": {
            "t/ns": {
                "publishMsgs": msgs,
                "publishBytes": {"used": round(demand * 100), "demand": demand * 100},
            }
        },
    }


@pytest.fixture
def reported(
    servers: list[FastAPI], client: TestClient, auth: Any, clock: FakeClock, engine: Engine
) -> None:
    """Group ``rg`` on ``t/ns``, its quota shared by reporters ``a`` and ``b`` on two server
    processes (``b`` saying what it enforces) through demands that rise and fall, and ``c``
    reporting for ``t/free``, which no group limits."""
    create_group(client, "rg", publishRateInMsgs=1000, publishRateInBytes=50_000)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg")
    create_namespace(client, "t/free")
    admin = auth(SUPERUSER)
    enforced = None
    for demand in (800, 800, 900, 200, 200, 700, 700):
        clock.advance(1.0)
        report(servers[0], admin, "a", body(clock, 600))
        answer = report(servers[1], admin, "b", body(clock, demand, enforced))
        enforced = answer["namespaces"]["t/ns"]["allocations"]["publishMsgs"]
        free = body(clock, 50)
        free["namespaces"] = {"t/free": free["namespaces"]["t/ns"]}
        report(servers[0], admin, "c", free)
    with engine.connect() as connection:
        in_force = connection.scalar(select(QuotaGroup.publish_msgs_in_force))
    assert in_force is not None and in_force > 500  # something to check


def violations(result: Result) -> list[str]:
    assert result.exit_code == 1, result.output
    lines: list[str] = result.stdout.splitlines()
    return lines


@pytest.mark.usefixtures("reported")
class TestCommand:
    def test_a_store_after_real_reports_passes(
        self, database_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        result = rgadmin_check(database_url, monkeypatch)
        assert result.exit_code == 0, result.output
        with engine.connect() as connection:
            groups = connection.scalar(select(func.count()).select_from(QuotaGroup))
        assert (
            result.stdout == f"ok: {groups} groups, 2 rows counted in them, 1 attachments checked\n"
        )

    def test_a_changed_sum_in_force(
        self, database_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with engine.begin() as connection:
            connection.execute(
                update(QuotaGroup)
                .where(QuotaGroup.name == "rg")
                .values(publish_bytes_in_force=QuotaGroup.publish_bytes_in_force + 100)
            )
        [line] = violations(rgadmin_check(database_url, monkeypatch))
        assert line.startswith("group rg: publish_bytes_in_force is ")
        assert "expected" in line
        with pytest.raises(AssertionError, match="group rg: publish_bytes_in_force is "):
            assert_store_consistent(database_url)

    def test_a_gone_reporter_still_counted(
        self, database_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Gone a moment ago: servers forget it at their next look, so it passes.
        set_lease(engine, "b", datetime.now(UTC) - timedelta(seconds=1))
        assert rgadmin_check(database_url, monkeypatch).exit_code == 0
        set_lease(engine, "b", datetime.now(UTC) - timedelta(hours=1))
        [line] = violations(rgadmin_check(database_url, monkeypatch))
        assert line.startswith("group rg: 1 rows (t/ns) of reporter b, whose lease ran out at ")

    def test_attachments_to_missing_groups(
        self, database_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with foreign_keys_off(database_url) as execute:
            execute("UPDATE namespaces SET resource_group = 'lost-ns' WHERE name = 'free'")
            execute("UPDATE tenants SET resource_group = 'lost-t' WHERE name = 't'")
            execute("INSERT INTO default_resource_group VALUES (1, 'lost-d')")
        assert violations(rgadmin_check(database_url, monkeypatch)) == [
            f"{holder}: attached to group {group}, which does not exist "
            "(expected a resource_groups row)"
            for holder, group in (
                ("default resource group", "lost-d"),
                ("namespace t/free", "lost-ns"),
                ("tenant t", "lost-t"),
            )
        ]


def set_lease(engine: Engine, reporter: str, until: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(
            update(QuotaReporter)
            .where(QuotaReporter.reporter_id == reporter)
            .values(lease_until=until)
        )


@contextmanager
def foreign_keys_off(database_url: str) -> Iterator[Callable[[str], object]]:
    """Run statements with the foreign keys unchecked, as in a store restored without them:
    on SQLite on a connection of its own (they are off unless asked for), on PostgreSQL in a
    transaction whose triggers, the foreign keys' among them, do not fire."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        with closing(sqlite3.connect(str(url.database))) as connection, connection:
            yield connection.execute
        return
    engine = create_engine(sqlalchemy_url(database_url))
    try:
        with engine.begin() as connection:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
            yield lambda sql: connection.execute(text(sql))
    finally:
        engine.dispose()


class TestReading:
    def test_one_snapshot_while_others_write(self, database_url: str, engine: Engine) -> None:
        def quotas(connection: Connection) -> int:
            return int(connection.scalar(select(func.count()).select_from(RequestQuota)) or 0)

        with reading(database_url) as snapshot:
            assert quotas(snapshot) == 0
            with engine.begin() as connection:
                connection.execute(insert(RequestQuota).values(role="r", requests_per_second=5))
            assert quotas(snapshot) == 0
        with reading(database_url) as snapshot:
            assert quotas(snapshot) == 1

    def test_nothing_is_written(self, database_url: str, engine: Engine) -> None:
        with reading(database_url) as snapshot, pytest.raises(DBAPIError):
            snapshot.execute(insert(RequestQuota).values(role="r", requests_per_second=5))


class TestUnreadable:
    """Exit 2 and one line, no traceback, when there is no store to check."""

    def unreadable(self, database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
        result = rgadmin_check(database_url, monkeypatch)
        assert result.exit_code == 2, result.output
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("Error: ")
        return line

    def test_no_such_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        line = self.unreadable(f"sqlite:///{tmp_path}/missing.db", monkeypatch)
        assert "No SQLite database file at" in line
        assert not (tmp_path / "missing.db").exists()

    def test_never_migrated(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        sqlite3.connect(tmp_path / "empty.db").close()
        line = self.unreadable(f"sqlite:///{tmp_path}/empty.db", monkeypatch)
        assert "The database has no schema" in line

    def test_a_schema_behind(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        url = f"sqlite:///{tmp_path}/old.db"
        upgrade_schema(url)
        script = ScriptDirectory(str(migrations_directory()))
        earlier = script.get_revision(script.get_current_head()).down_revision
        with closing(sqlite3.connect(tmp_path / "old.db")) as connection, connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (earlier,))
        assert "behind this server's" in self.unreadable(url, monkeypatch)

    def test_a_database_that_does_not_answer(self, monkeypatch: pytest.MonkeyPatch) -> None:
        line = self.unreadable("postgresql://postgres@127.0.0.1:1/rg", monkeypatch)
        assert line.startswith("Error: Cannot read the store (database postgresql://")
