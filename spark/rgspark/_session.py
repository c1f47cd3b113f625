"""What rgspark asks of a SparkSession, classic or Spark Connect alike, without calling
the JVM or the Connect server: which kind it is, its SparkContext, its application, and
whether it hides the token keys from the driver (a Connect session does).

Imports nothing of PySpark at load, so `import rgspark` stays light.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = [
    "active_session",
    "application_id",
    "is_connect",
    "release_key",
    "spark_context",
    "warn_hidden_token",
]

logger = logging.getLogger("rgspark")

HIDDEN_TOKEN = (
    "rgspark: a Spark Connect session shows the driver's Python neither spark.rgspark.token "
    "nor spark.rgspark.tokenFile (its server hides the values of keys that match "
    "spark.redaction.regex, set or not), so the client built from the configuration has no "
    "token: when the admin server needs one, make the client with "
    "ResourceGroupClient(url, tenant=..., namespace=..., token=...) and pass it to throttle"
)


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (whose classes live in
    ``pyspark.sql.connect``): asked by its class, which needs none of Connect's packages."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def spark_context(spark: SparkSession) -> SparkContext | None:
    """A classic session's SparkContext; None for a Spark Connect session, which has none
    (asking it for ``sparkContext`` raises)."""
    return None if is_connect(spark) else spark.sparkContext


def application_id(spark: SparkSession) -> str:
    """The Spark application's id, from the session's configuration: a Spark Connect session
    has no SparkContext to ask."""
    return str(spark.conf.get("spark.app.id"))


def warn_hidden_token(spark: SparkSession) -> None:
    """Say, on a Spark Connect session, that a client without a token may owe it to the
    session hiding the token keys: unread, they would surface only as a rejected token."""
    if is_connect(spark):
        logger.warning(HIDDEN_TOKEN)


def release_key(spark: SparkSession) -> str:
    """What ends when `spark`'s application does: a Spark Connect session's id (the sessions
    of one Connect server share its application, and each ends on its own); else the Spark
    application's id."""
    if is_connect(spark):
        return str(spark.session_id)  # type: ignore[attr-defined]  # Connect's own
    return application_id(spark)


def active_session() -> SparkSession | None:
    """The calling thread's SparkSession, else the driver's default one (a ``foreachBatch``
    callback, or a thread of the application's own, made none active), classic or Connect;
    None in a task, or in a process without Spark."""
    if "pyspark" not in sys.modules:  # nothing made a session: none to import PySpark for
        return None
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        return SparkSession.active()
    except PySparkRuntimeError:  # none made, or a task's process
        return None
