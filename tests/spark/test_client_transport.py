"""`ResourceGroupClient(..., transport=)`: the driver's calls go through the transport given, as
with httpx's own clients; the copies pickled to tasks leave it behind and connect to the URL.

The transport under test is a real one: httpx's `HTTPTransport` on a Unix socket where the
admin server listens, behind a URL whose host does not resolve, so that only the transport
can reach the server.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from app.auth import create_token, generate_secret_key
from app.db import upgrade_schema
from rgspark import ResourceGroupClient, ServerUnreachableError, throttle
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import create_group, create_namespace, create_tenant, running_app

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.conftest import RGServer

# `.invalid` never resolves (RFC 2606): a request that reaches the server went by the socket.
NOWHERE = "http://rg.invalid"


@pytest.fixture
def socket_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A server on a Unix socket with namespace ``t/ns`` in group ``g`` (100 msgs/s); yields
    the socket's path and a token whose role may produce to the namespace."""
    database_url = f"sqlite:///{tmp_path / 'rg.db'}"
    upgrade_schema(database_url)
    secret_key = generate_secret_key()
    sock = tmp_path / "rg.sock"
    superuser = create_token(subject=SUPERUSER, secret_key=secret_key)
    with (
        running_app(make_settings(database_url, secret_key)) as app,
        serve(app, uds=str(sock)),
        httpx.Client(
            base_url=NOWHERE,
            transport=httpx.HTTPTransport(uds=str(sock)),
            headers={"Authorization": f"Bearer {superuser}"},
        ) as admin,
    ):
        create_group(admin, "g", publishRateInMsgs=100)
        create_tenant(admin, "t")
        create_namespace(admin, "t/ns", group="g", producers=["job"])
        yield sock, create_token(subject="job", secret_key=secret_key)


def test_the_drivers_calls_go_through_the_transport(socket_server: tuple[Path, str]) -> None:
    sock, token = socket_server
    transport = httpx.HTTPTransport(uds=str(sock))
    client = ResourceGroupClient(
        NOWHERE, tenant="t", namespace="ns", token=token, timeout_s=5, transport=transport
    )

    policy = client.check()

    assert policy["resourceGroup"] == "g"
    assert policy["limits"]["publishRateInMsgs"] == 100
    # The same client without the transport has no way to the server.
    with pytest.raises(ServerUnreachableError, match="does not answer"):
        ResourceGroupClient(NOWHERE, tenant="t", namespace="ns", token=token, timeout_s=5).check()


def test_a_pickled_client_leaves_its_transport_behind() -> None:
    transport = httpx.HTTPTransport(retries=2)  # holds an SSL context: not picklable
    client = ResourceGroupClient(
        "http://127.0.0.1:1", tenant="t", namespace="ns", token="x", transport=transport
    )

    copy = pickle.loads(pickle.dumps(client))

    assert copy.transport is None
    assert client.transport is transport  # the driver's client keeps it
    settings = ("url", "tenant", "namespace", "token", "on_no_policy", "timeout_s")
    assert {name: getattr(copy, name) for name in settings} == {
        name: getattr(client, name) for name in settings
    }


@pytest.mark.spark
def test_a_job_ships_a_client_given_a_transport_and_its_tasks_use_the_url(
    spark: SparkSession, rg_server: RGServer
) -> None:
    job = rg_server.namespace(publishRateInMsgs=10_000)
    # Not picklable: shipped as it is, the client would fail the job before it starts.
    client = job.client(transport=httpx.HTTPTransport(retries=2), startup_timeout_s=10)

    count = throttle(spark.range(500, numPartitions=2), client, "publish").count()

    # With on_no_policy "fail", a task that could not reach the server would have failed.
    assert count == 500
    assert client.stats["publish"].rows == 500
