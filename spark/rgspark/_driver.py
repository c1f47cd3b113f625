"""What the driver does before a helper's tasks run: the same for `throttle`, the sink and
the wrapper of user functions, so that each checks the executors and counts in the same
`client.stats[kind]`.

Works on classic and Spark Connect sessions alike. A Connect session has no SparkContext,
hence no accumulators: its tasks count on the admin server (`rgspark._server_stats`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._checks import ensure_checked
from ._release import release_when_done
from ._server_stats import stats_on_server
from ._session import is_connect, spark_context
from ._stats import ThrottleStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._client import ResourceGroupClient

__all__ = ["prepare", "stats_for"]


def prepare(client: ResourceGroupClient, kind: str, spark: SparkSession) -> ThrottleStats:
    """Check the executors (once per application and client), have the client's job
    released when the application ends (`rgspark._release`), and return the client's
    figures for `kind`, which the helper's tasks add to."""
    ensure_checked(client, spark)
    release_when_done(client, spark)  # its workers' shares, at once when the application ends
    return stats_for(client, kind, spark)


def stats_for(client: ResourceGroupClient, kind: str, spark: SparkSession) -> ThrottleStats:
    """The client's figures for `kind`, made on the driver the first time."""
    if kind not in client.stats:
        client.stats[kind] = (
            stats_on_server(client, kind)
            if is_connect(spark)
            else ThrottleStats(spark_context(spark), kind)
        )
    stats: ThrottleStats = client.stats[kind]
    return stats
