from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from app.auth import create_token, generate_secret_key
from app.db import upgrade_schema
from rgspark import ResourceGroupClient
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import create_group, create_namespace, create_tenant, running_app

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Reports every half second: quota changes and new tasks settle twice as fast as by default.
REPORT_INTERVAL_S = 0.5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    import pyspark

    if int(pyspark.__version__.split(".")[0]) >= 4:
        return
    # PySpark 3.5's own warnings, gone in 4.0: it leaves the socket that brings back an RDD's
    # collect() to the garbage collector (java_gateway.py, local_connect_and_auth), so
    # whichever test runs then would fail on the ResourceWarning; and its Arrow UDFs check
    # pandas' version with distutils' LooseVersion, deprecated.
    marks = [
        pytest.mark.filterwarnings(
            "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
        ),
        pytest.mark.filterwarnings(
            "ignore:distutils Version classes are deprecated:DeprecationWarning"
        ),
    ]
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            for mark in marks:
                item.add_marker(mark)


class FakeMonotonicClock:
    """Monotonic nanoseconds that move only when a test moves them."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        # Not zero, so that nothing can rely on time starting at 0.
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1_000_000_000)

    def sleep(self, seconds: float) -> None:
        """A sleep that passes fake time instead of real time."""
        self.advance(seconds)


@pytest.fixture
def clock() -> FakeMonotonicClock:
    return FakeMonotonicClock()


# ---------------------------------------------------------------------------------------------
# A real admin server


_names = itertools.count(1)


@dataclass(frozen=True)
class JobNamespace:
    """A namespace in a group of its own, and a token for a role that may produce to it."""

    server: RGServer
    group: str
    tenant: str
    namespace: str
    role: str
    token: str

    def client(self, **options: Any) -> ResourceGroupClient:
        """A client of the namespace with its role's token, unless `options` say otherwise."""
        return ResourceGroupClient(
            self.server.url,
            tenant=self.tenant,
            namespace=self.namespace,
            **{"token": self.token, **options},
        )

    def set_rates(self, **rates: float) -> None:
        """Change the group's rates (Pulsar's names, e.g. ``publishRateInMsgs=1000``)."""
        self.server.set_rates(self.group, **rates)


class RGServer:
    """The admin server on a real port, with a superuser's HTTP client to set it up."""

    def __init__(self, url: str, secret_key: bytes, report_interval_s: float) -> None:
        self.url = url
        self.secret_key = secret_key
        self.report_interval_s = report_interval_s
        self.admin = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {self.token(SUPERUSER)}"}
        )

    def token(self, role: str) -> str:
        return create_token(subject=role, secret_key=self.secret_key)

    def call(self, method: str, path: str, body: Any = None) -> None:
        response = self.admin.request(method, path, json=body)
        assert response.status_code == 204, (method, path, response.status_code, response.text)

    def set_rates(self, group: str, **rates: float) -> None:
        self.call("PUT", f"/admin/v2/resourcegroups/{group}", rates)

    def namespace(self, **rates: float) -> JobNamespace:
        """A new group with `rates` (none: unlimited), a tenant and namespace using it, and a
        token for a role granted ``produce`` on the namespace."""
        n = next(_names)
        job = JobNamespace(
            server=self,
            group=f"g{n}",
            tenant=f"t{n}",
            namespace="ns",
            role=f"job{n}",
            token=self.token(f"job{n}"),
        )
        create_group(self.admin, job.group, **rates)
        create_tenant(self.admin, job.tenant)
        namespace = f"{job.tenant}/{job.namespace}"
        create_namespace(self.admin, namespace, group=job.group, producers=[job.role])
        return job

    def close(self) -> None:
        self.admin.close()


@contextmanager
def running_server(
    directory: Path, report_interval_s: float = REPORT_INTERVAL_S
) -> Iterator[tuple[RGServer, ExitStack]]:
    """A server on its own migrated SQLite database in `directory`.

    Yields the server and the stack that runs it: closing the stack stops the server, which
    a test may do early to see what jobs do without it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    database_url = f"sqlite:///{directory / 'rg.db'}"
    upgrade_schema(database_url)
    secret_key = generate_secret_key()
    # A usage sample a second, so that a job of a few seconds has complete moments within it.
    settings = make_settings(
        database_url,
        secret_key,
        report_interval_seconds=report_interval_s,
        usage_history_resolution_seconds=1.0,
    )
    with ExitStack() as stack:
        app = stack.enter_context(running_app(settings))
        url = stack.enter_context(serve(app))
        server = RGServer(url, secret_key, report_interval_s)
        stack.callback(server.close)
        yield server, stack


@pytest.fixture(scope="session")
def rg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RGServer]:
    """One server for the session; each test makes namespaces of its own on it."""
    with running_server(tmp_path_factory.mktemp("rg-server")) as (server, _):
        yield server


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[RGServer, ExitStack]]:
    """A server for one test, which may stop it early by closing the stack."""
    with running_server(tmp_path / "own-server") as pair:
        yield pair


# ---------------------------------------------------------------------------------------------
# Spark


@pytest.fixture(scope="session")
def spark(rg_server: RGServer) -> Iterator[SparkSession]:
    """A local SparkSession on two cores whose Python workers run this interpreter.

    Arrow batches of at most 100 rows, and 1 KiB worker buffers, so that rows reach the next
    operator of a job within milliseconds of `throttle` releasing them, where a test can
    time them (by default, a Python worker's output waits for 64 KiB to fill).

    Stopped before the server (which it depends on for that alone), so that the workers'
    reporters do not see the server go first.
    """
    from pyspark.sql import SparkSession

    saved = {name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rgspark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .config("spark.buffer.size", "1024")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
