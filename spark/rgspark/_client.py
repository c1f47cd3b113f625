"""`ResourceGroupClient`: what a job names once, on the driver, and ships to every task."""

from __future__ import annotations

import atexit
import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

from ._admin import AdminClient
from ._checks import check_driver, check_executors
from ._conf import NoPolicy, options_from, rename
from ._exceptions import (
    AuthenticationError,
    ConfigurationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    PolicyUnavailableError,
)
from ._quota import NamespaceQuota
from ._reporter import Reporter
from .wire import DIMENSIONS, UNLIMITED_ALLOCATION, job_reporter_id

if TYPE_CHECKING:
    import httpx
    from pyspark.sql import SparkSession

__all__ = ["ResourceGroupClient"]

logger = logging.getLogger("rgspark")

_NO_POLICY_MODES = ("fail", "block", "unlimited")
# Waits between a worker's first tries while the server does not answer: the first short,
# so that a server starting with the job is seen soon; the longest short enough that a job
# blocked on it starts within seconds of it coming back.
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 10.0
# Failures of a first report that waiting for the server will not fix.
_SETUP_ERRORS = (AuthenticationError, PermissionDeniedError, NamespaceNotFoundError)


class ResourceGroupClient:
    """The admin server, the namespace a job's traffic counts against, and how to behave.

    Small and picklable: create it on the driver, call `check` there to fail fast, and pass
    it to `throttle` (or the sink and reader helpers), which ship it to every task. In each
    worker process, the first task that needs it starts one shared runtime per server and
    namespace: the namespace's buckets and a daemon thread that reports usage and applies
    the allocation. Its share is released when the Spark application ends (the driver
    releases its job: Spark ends Python workers without running their exit handlers), or
    when the process exits normally; a worker killed on its own holds its share until its
    lease and grace run out.

    Options:

    - ``on_no_policy``: what a worker does while it has never received an allocation (the
      server is unreachable when it starts). ``"fail"`` (default): retry with backoff, and
      once ``startup_timeout_s`` has passed without an answer raise
      `PolicyUnavailableError`, which fails the task; ``"block"``: keep retrying (at
      least every 10 s), holding its tasks back until the server answers, then run at the
      allocation; ``"unlimited"``: run unthrottled until the first answer; or a mapping of
      safe rates per dimension, e.g. ``{"publishMsgs": 100}`` (dimensions not named run
      unlimited), which each worker process holds until the first answer, so a job
      running N tasks at once sends up to N times as much. Once an allocation arrived, an
      unreachable server never stops a job (fail-static): workers retry with backoff and
      keep their last allocation while the server last answered less than 3 report
      intervals ago (it still counts them alive and holding it); after that they hold the
      last answer's fallback, their fair share of the group (those of all workers add up
      to its quota at most), until it answers. A rejected token, a refused role or a
      missing namespace fails the task with ``"fail"`` and ``"block"`` alike.
    - ``startup_timeout_s`` (30): how long ``"fail"`` retries first.
    - ``timeout_s`` (10): each request's timeout.
    - ``transport``: an `httpx.BaseTransport` for the calls made from this process, as
      httpx's clients take one (``httpx.HTTPTransport(retries=..., uds=..., proxy=...)``,
      or ``httpx.MockTransport`` in tests). It stays on the driver: the copy pickled to
      the tasks has none, so workers, and the executors' half of `check`, connect to
      ``url`` with httpx's default transport; so does a runtime's long poll on changes.

    After an action, ``client.stats["publish"]`` (or ``"dispatch"``) on the driver says how
    many rows and bytes went through and how long tasks were held back.

    `from_conf` builds one from Spark's configuration (``spark.rgspark.*``) instead.
    """

    def __init__(
        self,
        url: str,
        *,
        tenant: str,
        namespace: str,
        token: str | None = None,
        on_no_policy: NoPolicy = "fail",
        startup_timeout_s: float = 30.0,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"url must be an http:// or https:// URL, not {url!r}")
        for name, value in (("tenant", tenant), ("namespace", namespace)):
            if not isinstance(value, str) or not value or "/" in value:
                raise ConfigurationError(f"{name} must be a non-empty name, not {value!r}")
        if isinstance(on_no_policy, str):
            if on_no_policy not in _NO_POLICY_MODES:
                raise ConfigurationError(
                    f"on_no_policy must be one of {', '.join(_NO_POLICY_MODES)} or a mapping of "
                    f"safe rates, not {on_no_policy!r}"
                )
        else:
            unknown = set(on_no_policy) - set(DIMENSIONS)
            if unknown or not all(rate > 0 for rate in on_no_policy.values()):
                raise ConfigurationError(
                    f"on_no_policy rates must be positive, keyed by {', '.join(DIMENSIONS)}"
                )
        self.url = url.rstrip("/")
        self.tenant = tenant
        self.namespace = namespace
        self.token = token
        self.on_no_policy: NoPolicy = (
            on_no_policy if isinstance(on_no_policy, str) else dict(on_no_policy)
        )
        self.startup_timeout_s = startup_timeout_s
        self.timeout_s = timeout_s
        self.transport = transport
        #: This client's job (`rgspark.wire.JOB_ID_PATTERN`), drawn here and pickled to the
        #: tasks: its workers' reporter ids begin with it, so that the driver frees all their
        #: shares in one call when the application ends (`rgspark._release`).
        self.job = secrets.token_hex(8)
        #: What went through, per kind: `ThrottleStats`, made on the driver by `throttle`.
        self.stats: dict[str, Any] = {}

    @classmethod
    def from_conf(cls, spark: SparkSession) -> ResourceGroupClient:
        """The client that the session's ``spark.rgspark.*`` keys describe: ``url``,
        ``tenant``, ``namespace`` (required), ``token`` or ``tokenFile`` (read here, on the
        driver), ``onNoPolicy``, ``startupTimeout``, ``timeout``.

        The same object while the Spark application runs and the keys keep their values:
        `throttle` without a client uses it, so its `stats` tell what those calls did.
        Raises `ConfigurationError` naming a key that is missing or wrong. A Spark Connect
        session hides the token keys from the driver's Python (their names match
        ``spark.redaction.regex``): there the client has no token, and a warning says so.
        """
        from ._session import application_id, warn_hidden_token

        options = options_from(lambda key: spark.conf.get(key, None))
        key = (application_id(spark), repr(sorted(options.items())))
        client = _from_conf.get(key)
        if client is None:
            try:
                client = cls(**options)
            except ConfigurationError as exc:
                raise ConfigurationError(rename(str(exc), options)) from None
            if client.token is None:
                warn_hidden_token(spark)
            client = _from_conf.setdefault(key, client)
        return client

    def __repr__(self) -> str:
        return (
            f"ResourceGroupClient({self.url!r}, tenant={self.tenant!r}, "
            f"namespace={self.namespace!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # A transport holds sockets and locks, and serves the process that made it: the
        # tasks' copies connect to `url` by themselves.
        return {**self.__dict__, "transport": None}

    def admin(self) -> AdminClient:
        """A client of the admin server with this client's token, timeout and transport."""
        return AdminClient(
            self.url, token=self.token, timeout=self.timeout_s, transport=self.transport
        )

    def check(self, spark: SparkSession | None = None) -> dict[str, Any]:
        """Fail fast, before any data moves: the server answers, the token is accepted, the
        role may report for the namespace and it exists. Returns its effective group and
        limits: ``{"resourceGroup": name or None, "limits": {...} or None,
        "reportIntervalMs": n}``.

        With a `spark` session, the executors are checked too, with a tiny job: that their
        Python runs, imports rgspark and PyArrow, and reaches the server with the job's
        token. (`throttle` runs that part itself, once per Spark application and client.)

        Raises `ServerUnreachableError`, `AuthenticationError`, `PermissionDeniedError`,
        `NamespaceNotFoundError` or `ConfigurationError` (the executors' Python), each in
        one line that says what to fix.
        """
        policy = check_driver(self)
        if spark is not None:
            check_executors(self, spark)
        return policy

    def quota(self, kind: str) -> NamespaceQuota:
        """This process's limits for the namespace, started on first use (in a worker), with
        `kind` (``"publish"`` or ``"dispatch"``) announced as traffic about to flow."""
        return _runtime(self, kind)


# Clients built from each Spark application's configuration, by their settings.
_from_conf: dict[tuple[str, str], ResourceGroupClient] = {}
# One runtime per server, token, namespace and transport (always None in a task: the
# transport stays on the driver).
_RuntimeKey = tuple[str, "str | None", str, str, "httpx.BaseTransport | None"]
_runtimes: dict[_RuntimeKey, NamespaceQuota] = {}
_runtimes_lock = threading.Lock()


def _runtime(client: ResourceGroupClient, kind: str) -> NamespaceQuota:
    key = (client.url, client.token, client.tenant, client.namespace, client.transport)
    quota = _runtimes.get(key)
    if quota is None:
        with _runtimes_lock:
            quota = _runtimes.get(key)
            if quota is None:
                quota = _runtimes[key] = _start(client, kind)
    quota.use(kind)
    return quota


def _start(client: ResourceGroupClient, kind: str) -> NamespaceQuota:
    policy = client.on_no_policy
    quota = NamespaceQuota(client.tenant, client.namespace)
    quota.use(kind)
    if not isinstance(policy, str):
        quota.apply({dim: policy.get(dim, UNLIMITED_ALLOCATION) for dim in DIMENSIONS})
    reporter = Reporter(client.admin(), [quota], reporter_id=job_reporter_id(client.job))
    if policy in ("fail", "block"):
        _first_report(reporter, client, forever=policy == "block")
    else:
        _try_once(reporter)
    reporter.start()
    atexit.register(reporter.close)
    return quota


def _first_report(reporter: Reporter, client: ResourceGroupClient, *, forever: bool) -> None:
    """Hold the first task until the server has answered once: retry with backoff and,
    unless `forever`, give up once `startup_timeout_s` has passed (the last try at it)."""
    deadline = time.monotonic() + client.startup_timeout_s
    delay = _FIRST_RETRY_S
    tries = 0
    while True:
        try:
            reporter.run_once()
            return
        except _SETUP_ERRORS:
            raise  # waiting will not fix the token, the grants or the namespace
        except Exception as exc:  # no answer, or one it cannot use: the same to a worker
            left = deadline - time.monotonic()
            if not forever and left <= 0:
                raise no_allocation(client, exc) from exc
            tries += 1
            log = logger.warning if tries == 1 else logger.debug
            log("rgspark: waiting for a first allocation (%s)", exc)
            time.sleep(delay if forever else min(delay, left))
            delay = min(delay * 2, _MAX_RETRY_S)


def no_allocation(client: ResourceGroupClient, cause: Exception) -> PolicyUnavailableError:
    """What a worker with ``on_no_policy="fail"`` raises when `startup_timeout_s` passed
    without an answer: one line, as the README's Troubleshooting quotes it."""
    return PolicyUnavailableError(
        f"No allocation from {client.url} for {client.tenant}/{client.namespace} after "
        f"{client.startup_timeout_s:g} s: {cause}. Fix the server or the token, or choose "
        "another on_no_policy."
    )


def _try_once(reporter: Reporter) -> None:
    if not reporter.report():
        logger.warning("rgspark: no allocation yet; running as on_no_policy says until one")
