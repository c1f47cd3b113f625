"""A finished application's shares freed at once, from its driver.

Each worker process's reporter frees its own share when the process exits normally
(``atexit``, `Reporter.close`). Spark's Python workers do not: the daemon ends them with
``os._exit``, or its executor ends it, and ``atexit`` never runs. Left to themselves, their
shares would come back only when their leases and the grace ran out (10 s and more). So
each `ResourceGroupClient` draws a job id on the driver, its workers' reporter ids begin
with it (`rgspark.wire.job_reporter_id`), and the driver releases them all in one call,
``DELETE /quota/v1/jobs/{job}``, when the application ends:

- when the session stops while the process goes on (``spark.stop()``): a daemon thread
  looks every `POLL_S` whether it has (a classic session's SparkContext is stopped or no
  longer the active one; a Spark Connect session says ``is_stopped``);
- when the driver process exits (``atexit``: the driver is a plain Python process). A
  classic SparkContext still running is stopped first, as Spark would stop it right after
  (and as PySpark's shell does at exit): workers alive when their shares are freed would
  learn of it at once (the group's wake) and report again, counted anew until their leases
  ran out.

Once per application and job, whichever comes first; a failure is logged, never raised.
A worker that dies on its own while its application runs (killed, out of memory) is freed
by the server when its lease and grace run out, as before. A Spark Connect server's workers
outlive its sessions: released, a worker still alive is counted again at its next report.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ._admin import AdminClient
from ._session import release_key, spark_context

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from ._client import ResourceGroupClient

__all__ = ["POLL_S", "release_job", "release_when_done"]

logger = logging.getLogger("rgspark")

POLL_S = 0.25  # how often the watcher looks whether a session stopped
RELEASE_TIMEOUT_S = 2.0  # the most one release waits for the server: it may run at exit


@dataclass
class _Application:
    """A Spark application (a Spark Connect session) whose end releases its clients' jobs."""

    stopped: Callable[[], bool]
    context: SparkContext | None
    """A classic session's SparkContext, stopped at exit before the release; else None."""
    clients: dict[str, ResourceGroupClient] = field(default_factory=dict)
    """By job: the first client of each job, whose server and token release it."""


_lock = threading.Lock()
_applications: dict[str, _Application] = {}
_released: set[tuple[str, str]] = set()  # (application, job): at most one release each
_watcher: threading.Thread | None = None
_exit_hooked = False


def release_when_done(client: ResourceGroupClient, spark: SparkSession) -> None:
    """Release `client`'s job when `spark`'s application ends (the session stops, or this
    process exits), once per application and job."""
    application = release_key(spark)
    key = (application, client.job)
    global _watcher, _exit_hooked
    with _lock:
        if key in _released:
            return
        known = _applications.get(application)
        if known is None:
            known = _applications[application] = _Application(
                _stopped_test(spark), spark_context(spark)
            )
        known.clients.setdefault(client.job, client)
        if not _exit_hooked:
            atexit.register(_at_exit)
            _exit_hooked = True
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="rgspark-release", daemon=True)
            _watcher.start()


def _stopped_test(spark: SparkSession) -> Callable[[], bool]:
    """Whether the session has stopped, asked without a call to the JVM or the server."""
    context = spark_context(spark)
    if context is not None:
        kind = type(context)
        return lambda: (
            context._jsc is None or getattr(kind, "_active_spark_context", None) is not context
        )
    # A Spark Connect session; a session of neither kind is released at exit only.
    return lambda: bool(getattr(spark, "is_stopped", False))


def _watch() -> None:
    """Until the process exits (a daemon thread): release the jobs of sessions that
    stopped."""
    while True:
        time.sleep(POLL_S)
        with _lock:
            stopped = [name for name, app in _applications.items() if _stopped_safely(app)]
        for name in stopped:
            _release(name)


def _stopped_safely(application: _Application) -> bool:
    try:
        return application.stopped()
    except Exception:  # a session half torn down: its end is for the exit to see
        return False


def _at_exit() -> None:
    """The driver exits: every application still running ends now. A classic SparkContext
    is stopped first, so that its workers are gone before their shares are freed."""
    with _lock:
        running = list(_applications.items())
    for name, application in running:
        context = application.context
        if context is not None and context._jsc is not None:
            try:
                context.stop()
            except Exception as exc:  # its workers then go with the JVM, a moment later
                logger.debug("rgspark: could not stop the SparkContext at exit: %s", exc)
        _release(name)


def _release(name: str) -> None:
    """Release the jobs of the application `name`, unless another thread did."""
    with _lock:
        application = _applications.pop(name, None)
        if application is None:
            return
        _released.update((name, job) for job in application.clients)
    for job, client in application.clients.items():
        release_job(client, job)


def release_job(client: ResourceGroupClient, job: str) -> None:
    """One ``DELETE /quota/v1/jobs/{job}`` with `client`'s server and token; a failure is
    logged (the server frees the shares when their leases run out), never raised."""
    admin = AdminClient(
        client.url,
        token=client.token,
        timeout=min(client.timeout_s, RELEASE_TIMEOUT_S),
        transport=client.transport,
        keep_alive=False,
    )
    try:
        admin.release_job(job)
    except Exception as exc:  # at exit above all, nothing may come of it but a line
        logger.warning(
            "rgspark: could not release the workers of job %s at once (%s); the server "
            "frees their shares when their leases run out",
            job,
            exc,
        )
    else:
        logger.debug("rgspark: released the workers of job %s", job)
    finally:
        admin.close()
