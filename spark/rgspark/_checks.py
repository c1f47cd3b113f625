"""A job's setup checked before any data moves: from the driver, and from the executors.

`check_driver` asks the admin server for the namespace's policy from the driver.
`check_executors` runs a tiny Spark job whose tasks import rgspark and ask the same from the
executors, with the job's token: the executors' Python, what it can import and the network
they sit on are often not the driver's. Each failure is raised on the driver as one line
that says what to do, without the JVM's trace. `ensure_checked` is what the helpers call
(`rgspark._driver.prepare`): the executors' check, once per Spark application and client.

The check's job is a DataFrame's, and the application is known by its configuration, so that
a Spark Connect session, which has no SparkContext, is checked as a classic one is.

The checks take the client as a `CheckedClient`, the few settings they read, so that this
module needs nothing of `rgspark._client` (which calls it) and the two form no import cycle.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ._admin import AdminClient
from ._conf import NoPolicy
from ._exceptions import (
    AdminServerError,
    AuthenticationError,
    ConfigurationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    ServerUnreachableError,
    UnexpectedResponseError,
)
from ._session import application_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CheckedClient",
    "check_driver",
    "check_executors",
    "ensure_checked",
    "explain",
]

logger = logging.getLogger("rgspark")

# Tasks of the executors' check: enough to reach a few executors, few enough to cost nothing.
MAX_PROBE_TASKS = 8
PY_FILES = (
    "--py-files rgspark.zip (spark.submit.pyFiles; "
    "`python scripts/build_pyfiles.py dist/rgspark.zip` builds it)"
)
_ERRORS: dict[str, type[AdminServerError]] = {
    cls.__name__: cls
    for cls in (
        ServerUnreachableError,
        AuthenticationError,
        PermissionDeniedError,
        NamespaceNotFoundError,
        UnexpectedResponseError,
    )
}
# Failures that waiting for the server will not fix: workers raise them whatever
# ``on_no_policy`` says, unless it lets them run without a policy.
_SETUP_ERRORS = (AuthenticationError, PermissionDeniedError, NamespaceNotFoundError)

# Per Spark application and client settings: None once the check passed, or the server's
# failure that the client's on_no_policy lets its workers wait out (logged once).
_checked: dict[tuple[str, str, str, str, str | None], AdminServerError | None] = {}


class CheckedClient(Protocol):
    """What the checks read of a `ResourceGroupClient`: its settings, and an admin client
    for the driver's calls."""

    @property
    def url(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def token(self) -> str | None: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def on_no_policy(self) -> NoPolicy: ...
    def admin(self) -> AdminClient: ...


def check_driver(client: CheckedClient) -> dict[str, Any]:
    """The namespace's policy, as the driver gets it; one-line errors."""
    admin = client.admin()
    try:
        return admin.policy(client.tenant, client.namespace)
    except AdminServerError as exc:
        raise explain(exc, client, detail=_detail(exc)) from None
    finally:
        admin.close()


def check_executors(client: CheckedClient, spark: SparkSession) -> dict[str, Any]:
    """The namespace's policy, as the executors get it; raises, in one line, when they
    cannot run Python tasks, import rgspark or PyArrow, or get it."""
    found = _run_probe(client, spark)
    for result in found:
        where = f"Python {result['version']} at {result['python']} on {result['host']}"
        if "import_error" in result:
            raise ConfigurationError(_import_advice(result["import_error"], where))
        if "pyarrow_error" in result:
            raise ConfigurationError(
                f"PyArrow cannot be imported on the executors ({result['pyarrow_error']}; "
                f"{where}): throttle runs in mapInArrow, which needs it: install pyarrow in "
                "the executors' Python, or point spark.pyspark.python (PYSPARK_PYTHON) at "
                "one that has it"
            )
    for result in found:
        error = result.get("error")
        if error is not None:
            cls = _ERRORS.get(error["type"], UnexpectedResponseError)
            seen = cls(error["message"], status_code=error["status"], reason=error["reason"])
            raise explain(seen, client, detail=error["detail"], executor=result["host"])
    policy: dict[str, Any] = found[0]["policy"]
    return policy


def ensure_checked(client: CheckedClient, spark: SparkSession) -> None:
    """The executors' check, once per Spark application and client (url, tenant,
    namespace, token); later calls cost a dict lookup.

    Setup mistakes (rgspark or PyArrow missing on the executors) always raise. Server
    failures raise when the workers would fail on them too, only sooner: any of them with
    ``on_no_policy="fail"``; a rejected token, a refused role or a missing namespace with
    ``"block"``. Otherwise they are logged, and the workers do what ``on_no_policy`` says.
    """
    key = (
        application_id(spark),
        client.url,
        client.tenant,
        client.namespace,
        client.token,
    )
    if key in _checked:
        earlier = _checked[key]
        if earlier is None or not _fatal(client, earlier):
            return
    try:
        policy = check_executors(client, spark)
    except AdminServerError as exc:
        if _fatal(client, exc):
            raise
        logger.warning(
            "rgspark: %s; the workers do what on_no_policy=%r says", exc, client.on_no_policy
        )
        _checked[key] = exc
        return
    if policy.get("resourceGroup") is None:
        logger.warning(
            "rgspark: %s/%s has no resource group (none of its own, of its tenant, nor a "
            "default one): its traffic is not limited",
            client.tenant,
            client.namespace,
        )
    _checked[key] = None


def _fatal(client: CheckedClient, exc: AdminServerError) -> bool:
    """Whether the workers would fail on `exc` too: then the check fails, only sooner."""
    mode = client.on_no_policy
    return mode == "fail" or (mode == "block" and isinstance(exc, _SETUP_ERRORS))


def explain(
    exc: AdminServerError,
    client: CheckedClient,
    *,
    detail: str,
    executor: str | None = None,
) -> AdminServerError:
    """`exc` again (same class, status and reason), its message one line saying what to do.

    `executor` names the executor's host when the failure was seen there.
    """
    url = client.url
    names = f"{client.tenant}/{client.namespace}"
    seen = f" from the executors (on {executor})" if executor else ""
    answer = f"{exc.status_code}: {exc.reason}" if exc.reason else str(exc.status_code)
    if isinstance(exc, ServerUnreachableError):
        if executor:
            message = (
                f"The executors cannot reach the admin server at {url} (on {executor}: "
                f"{detail}): open its port to them, or give an address they can reach "
                "(spark.rgspark.url); an HTTP proxy in their environment is bypassed with "
                "spark.executorEnv.NO_PROXY"
            )
        else:
            message = (
                f"The admin server at {url} does not answer ({detail}): start it, or fix "
                "the address (spark.rgspark.url)"
            )
    elif isinstance(exc, AuthenticationError):
        message = (
            f"The admin server at {url} rejected the job's token{seen} ({answer}): give the "
            "job a valid token (spark.rgspark.token or spark.rgspark.tokenFile; "
            "`rgadmin tokens create --subject ROLE` mints one)"
        )
    elif isinstance(exc, PermissionDeniedError):
        role = _role(client.token)
        message = (
            f"The job's token may not report for {names}{seen} ({answer}): grant "
            f"{'role ' + role if role else 'its role'} produce on {names} (`rgadmin namespaces "
            f"grant-permission {names} --role {role or 'ROLE'} --actions produce`), and check "
            "the tenant and namespace (a role without rights is refused whether they exist or "
            "not)"
        )
    elif isinstance(exc, NamespaceNotFoundError):
        message = (
            f"The namespace {names} does not exist at {url}{seen} ({answer}): create it "
            f"(`rgadmin namespaces create {names}`) or fix spark.rgspark.tenant and "
            "spark.rgspark.namespace"
        )
    else:
        message = f"The admin server at {url} answered the policy request{seen}: {exc}"
    return type(exc)(_one_line(message), status_code=exc.status_code, reason=exc.reason)


def _import_advice(error: str, where: str) -> str:
    if "No module named 'rgspark'" in error:
        return (
            f"rgspark cannot be imported on the executors ({error}; {where}): set "
            "spark.pyspark.python (or PYSPARK_PYTHON, before the session starts) to a Python "
            f"that has rgspark, or ship it with {PY_FILES}"
        )
    return (
        f"rgspark cannot be imported on the executors ({error}; {where}): install what it "
        "needs (httpx) in the executors' Python, or set spark.pyspark.python (or "
        "PYSPARK_PYTHON) to a Python that has it"
    )


def _run_probe(client: CheckedClient, spark: SparkSession) -> list[dict[str, Any]]:
    """The probe's findings, one per task: a plain Python UDF, which needs no PyArrow on the
    executors (so it can say that one lacks it) and runs on classic and Connect sessions.

    A range of `MAX_PROBE_TASKS` rows is cut by Spark's default parallelism and coalesced to
    at most as many tasks: as many as the application has cores, up to `MAX_PROBE_TASKS`.
    """
    from pyspark.sql.functions import udf

    probe = udf(
        _probe(client.url, client.tenant, client.namespace, client.token, client.timeout_s),
        "string",
        useArrow=False,
    )
    rows = spark.range(MAX_PROBE_TASKS).coalesce(MAX_PROBE_TASKS).select(probe("id"))
    try:
        found = [json.loads(row[0]) for row in rows.collect()]
    except Exception as exc:
        if not type(exc).__module__.startswith(("py4j", "pyspark")):
            raise
        driver = ".".join(map(str, sys.version_info[:2]))
        raise ConfigurationError(
            f"The executors cannot run Python tasks ({job_failure(str(exc))}): set "
            "spark.pyspark.python (or PYSPARK_PYTHON, before the session starts) to a Python "
            f"{driver}, as on the driver, with PySpark, PyArrow and httpx on every executor, "
            f"and rgspark installed there or shipped with {PY_FILES}"
        ) from None
    return found


def _probe(
    url: str, tenant: str, namespace: str, token: str | None, timeout_s: float
) -> Callable[[int], str]:
    """The executors' check, as a UDF: the findings of the task that runs it, in JSON.

    Made here, and using no name of this module, so that cloudpickle ships it by value: an
    executor that cannot import rgspark still runs it, and says so instead of failing
    while the task is unpickled. A task probes once; its other rows get the same answer.
    """
    answers: list[str] = []

    def find() -> dict[str, Any]:
        import socket
        import sys

        found: dict[str, Any] = {
            "host": socket.gethostname(),
            "python": sys.executable,
            "version": ".".join(map(str, sys.version_info[:3])),
        }
        try:
            import rgspark
        except Exception as exc:  # not installed, or something it needs is not
            found["import_error"] = f"{type(exc).__name__}: {exc}"
            return found
        try:
            import pyarrow  # noqa: F401
        except Exception as exc:
            found["pyarrow_error"] = f"{type(exc).__name__}: {exc}"
        admin = rgspark.ResourceGroupClient(
            url, tenant=tenant, namespace=namespace, token=token, timeout_s=timeout_s
        ).admin()
        try:
            found["policy"] = admin.policy(tenant, namespace)
        except rgspark.AdminServerError as exc:
            cause = exc.__cause__
            found["error"] = {
                "type": type(exc).__name__,
                "message": str(exc),
                "status": exc.status_code,
                "reason": exc.reason,
                "detail": f"{type(cause).__name__}: {cause}" if cause else str(exc),
            }
        finally:
            admin.close()
        return found

    def probe(_: int) -> str:
        import json

        if not answers:
            answers.append(json.dumps(find()))
        return answers[0]

    return probe


# An error's name in a Python traceback or a JVM trace: `[module.]Name(Error|Exception): `.
_ERROR_NAME = re.compile(r"\b((?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception))): ")
_JVM_PREFIXES = ("java.", "javax.", "org.", "scala.", "py4j.", "io.netty.")
_FRAME_PREFIXES = ("at ", "File ", "...", "Traceback", "Caused by", "Driver stacktrace")


def job_failure(text: str) -> str:
    """What a failed Spark job's error text says went wrong, in one line: the Python
    worker's last error, else the failed task's JVM error, else the text's first line."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_FRAME_PREFIXES)]
    python_errors = []
    for line in lines:
        for match in _ERROR_NAME.finditer(line):
            if not match.group(1).startswith(_JVM_PREFIXES):
                python_errors.append(f"{match.group(2)}: {_balanced(line[match.end() :])}")
                break
    if python_errors:
        return _one_line(python_errors[-1])
    for line in lines:
        _, found, rest = line.partition("most recent failure: ")
        if found:
            _, _, cause = rest.partition("): ")
            if cause.strip():
                return _one_line(cause)
    return _one_line(lines[0] if lines else text)


def _balanced(text: str) -> str:
    """`text` without the closing brackets of an enclosing sentence."""
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1]
    return text.strip()


def _role(token: str | None) -> str | None:
    """The role a token names (its ``sub`` claim), read without checking the signature:
    only to name it in advice. None when it is not a JWT."""
    try:
        payload = token.split(".")[1] if token else ""
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    role = claims.get("sub") if isinstance(claims, dict) else None
    return role if isinstance(role, str) and role else None


def _detail(exc: AdminServerError) -> str:
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)


def _one_line(text: str, limit: int = 600) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
