"""What does each way of learning which of a reporter's groups moved cost, on PostgreSQL?

    python -m benchmarks.marker_reads [--groups 100000] [--planned 1,16,1000,5000]
                                      [--repeats 30] [--postgres-url URL]

prints one JSON object, measured on a PostgreSQL database created for the run (migrated with
``rgadmin migrate``, ``--groups`` groups' rows, analysed) and dropped afterwards: the median
milliseconds, over ``--repeats`` transactions, of ``UsageRepository.markers`` reading a
reporter's ``--planned`` groups by name, and of ``UsageRepository.changed_markers``, the look
at the markers changed since a reporter's last report, in a steady state (none changed).
``app.quota.tuning.FEW_GROUPS`` sets which a reporter uses: reporters of few groups read
theirs by name; a broker's thousands pay the look instead. ``compare_in_db_ms`` is a way not
taken, measured beside them: the database given the planned groups' names and markers,
answering only the groups whose marker differs (none, in a steady state).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, create_engine, insert, text

from app.auth import generate_secret_key
from app.models import QuotaGroup
from app.quota.repository import UsageRepository
from benchmarks._servers import migrate_rgadmin, server_env
from benchmarks.usage_ingest import DEFAULT_POSTGRES_URL, SUPERUSER, _database

# The way not taken: every planned (group, marker) to the database, the differing ones back.
COMPARE_IN_DB = text(
    "SELECT g.name, g.marker FROM unnest(CAST(:names AS VARCHAR[]), CAST(:markers AS BIGINT[])) "
    "AS p(name, marker) JOIN quota_groups g ON g.name = p.name WHERE g.marker <> p.marker"
)


def _populate(engine: Engine, groups: int) -> list[str]:
    """``groups`` groups' rows, changed an hour ago; their names."""
    names = [f"g{index:07d}" for index in range(groups)]
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    with engine.begin() as connection:
        connection.execute(
            insert(QuotaGroup),
            [{"name": name, "marker": i, "changed_at": hour_ago} for i, name in enumerate(names)],
        )
        connection.exec_driver_sql("ANALYZE quota_groups")
    return names


def _median_ms(engine: Engine, read: Callable[[UsageRepository], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        with engine.begin() as connection:
            queries = UsageRepository(connection)
            start = time.perf_counter()
            read(queries)
            times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 3)


def measure(
    engine: Engine, names: list[str], planned: list[int], repeats: int
) -> dict[str, object]:
    """The median cost of each read, per reporter size."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    by_name, compared = {}, {}
    for count in planned:
        step = max(1, len(names) // count)
        groups = names[::step][:count]  # spread over the index, as a broker's are
        by_name[str(count)] = _median_ms(engine, lambda q, g=groups: q.markers(g), repeats)
        # The markers as `_populate` gave them: the groups are as planned.
        given = {"names": groups, "markers": [int(name[1:]) for name in groups]}
        compared[str(count)] = _median_ms(
            engine, lambda q, p=given: q.connection.execute(COMPARE_IN_DB, p).all(), repeats
        )
    look = _median_ms(engine, lambda q: q.changed_markers(since, 5001), repeats)
    return {"by_name_ms": by_name, "compare_in_db_ms": compared, "changed_since_ms": look}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--planned", default="1,16,1000,5000", help="Groups per reporter.")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    args = parser.parse_args(argv)
    planned = [int(count) for count in args.planned.split(",")]
    with _database(args.postgres_url) as database_url, tempfile.TemporaryDirectory() as work:
        migrate_rgadmin(Path(work), server_env(database_url, generate_secret_key(), SUPERUSER))
        engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            figures = measure(engine, _populate(engine, args.groups), planned, args.repeats)
        finally:
            engine.dispose()
    print(json.dumps({"benchmark": "marker_reads", "groups": args.groups, **figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
