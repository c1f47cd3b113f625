"""`rgadmin check`'s rules as an assertion, for tests that leave a store behind: what the
quota bound rests on holds in it (`app.quota.check`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from app.config import Settings
from app.quota.check import find_violations
from app.quota.snapshot import read_snapshot, reading


def assert_store_consistent(
    database_url: str,
    *,
    now: float | None = None,
    report_interval_s: float = Settings().report_interval_seconds,
) -> None:
    """Fail, naming every violation, unless the store at ``database_url`` passes the check.

    ``now`` is the servers' clock (a `tests.factories.FakeClock`'s ``now``), which says
    which reporters are gone; by default, the real one.
    """
    read_at = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    with reading(database_url) as connection:
        snapshot = read_snapshot(connection, read_at)
    violations = find_violations(snapshot, report_interval_s)
    assert not violations, "\n".join(str(violation) for violation in violations)
