"""What the driver does before a helper's tasks run: the same for `throttle`, the sink and
the wrapper of user functions, so that each checks the executors and counts in the same
`client.stats[kind]`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._checks import ensure_checked
from ._stats import ThrottleStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._client import ResourceGroupClient

__all__ = ["prepare", "stats_for"]


def prepare(client: ResourceGroupClient, kind: str, spark: SparkSession) -> ThrottleStats:
    """Check the executors (once per application and client) and return the client's
    figures for `kind`, which the helper's tasks add to."""
    ensure_checked(client, spark)
    return stats_for(client, kind, spark)


def stats_for(client: ResourceGroupClient, kind: str, spark: SparkSession) -> ThrottleStats:
    """The client's figures for `kind`, made on the driver the first time."""
    if kind not in client.stats:
        client.stats[kind] = ThrottleStats(spark.sparkContext, kind)
    stats: ThrottleStats = client.stats[kind]
    return stats
