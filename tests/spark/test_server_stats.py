"""The figures of a Spark Connect session, counted by the admin server (`rgspark._server_stats`),
against a real server: what worker processes' tasks add is what the driver reads back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from rgspark import FiguresNotCountedError, ResourceGroupClient
from rgspark._server_stats import ServerCount, _merge, _Pending, stats_on_server
from rgspark._stats import ActionStats, Entry, ThrottleStats
from rgspark.wire import MAX_ACTIONS_PER_POST

if TYPE_CHECKING:
    from tests.spark.conftest import RGServer

START = 1_800_000_000.0  # seconds since the epoch: whole milliseconds, as the server keeps them


class Cuttable(httpx.HTTPTransport):
    """httpx's own transport, whose connections fail while `down` is set: the server
    dropping out of reach between two sends."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return super().handle_request(request)


@pytest.fixture
def client(rg_server: RGServer) -> Iterator[ResourceGroupClient]:
    job = rg_server.namespace(publishRateInMsgs=1000)
    yield job.client(transport=Cuttable())


def entry(rows: int, start_s: float, end_s: float, held_s: float = 0.0) -> Entry:
    return [rows, rows * 10, held_s, START + start_s, START + end_s]


def test_what_workers_add_is_what_the_driver_reads(client: ResourceGroupClient) -> None:
    stats = stats_on_server(client, "publish")
    # Two worker processes: each a pending count of its own, sending from several threads.
    workers = [_Pending(client, "publish") for _ in range(2)]

    def task(worker: _Pending, n: int) -> None:
        for i in range(50):
            worker.add("sql:1", entry(1, n + i * 0.01, n + i * 0.01 + 0.005, held_s=0.001))
            if i % 10 == 0:
                worker.send()
        worker.send()

    threads = [threading.Thread(target=task, args=(w, n)) for n, w in enumerate(workers * 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    workers[0].add("sql:2", entry(7, 5.0, 5.25, held_s=0.1))
    workers[0].send()

    assert (stats.rows, stats.bytes) == (207, 2070)
    assert stats.task_throttled_s == pytest.approx(0.3)
    assert stats.last == ActionStats(7, 70, pytest.approx(0.25), pytest.approx(0.1))
    # The first action, merged from both workers: its first start and last end.
    first = ServerCount(client, "publish").read().actions["sql:1"]
    assert first[0] == 200
    assert first[3:5] == [pytest.approx(START), pytest.approx(START + 3 + 0.49 + 0.005)]
    assert repr(stats).startswith("ThrottleStats(kind='publish', rows=207, bytes=2070, ")
    # Kinds and jobs apart.
    assert stats_on_server(client, "dispatch").rows == 0
    other_job = ResourceGroupClient(
        client.url, tenant=client.tenant, namespace=client.namespace, token=client.token
    )
    assert stats_on_server(other_job, "publish").rows == 0


def test_a_send_that_fails_is_kept_for_the_next(
    client: ResourceGroupClient, caplog: pytest.LogCaptureFixture
) -> None:
    worker = _Pending(client, "publish")
    transport = client.transport
    assert isinstance(transport, Cuttable)
    transport.down = True
    worker.add("sql:1", entry(3, 0, 1))
    with caplog.at_level(logging.WARNING, logger="rgspark"):
        worker.send()
        worker.add("sql:1", entry(4, 1, 2))
        worker.send()
    assert [r.getMessage() for r in caplog.records if "figures" in r.getMessage()] == [
        f"rgspark: could not send the figures of job {client.job} to the admin server "
        f"(The admin server at {client.url} did not answer: connection refused); they are "
        "sent with the next"
    ]

    transport.down = False
    worker.send()

    read = ServerCount(client, "publish").read()
    assert (read.rows, read.actions["sql:1"][3:5]) == (7, [START, START + 2])


def test_past_the_most_actions_a_send_names_the_oldest_two_become_one() -> None:
    actions: dict[str, Entry] = {}
    for n in range(MAX_ACTIONS_PER_POST + 3):
        _merge(actions, f"sql:{n}", entry(n, n, n + 0.5))
    assert len(actions) == MAX_ACTIONS_PER_POST
    assert sum(e[0] for e in actions.values()) == sum(range(MAX_ACTIONS_PER_POST + 3))
    assert actions["sql:0"][3:5] == [START, START + 3.5]  # 0 to 3 folded, in its name
    assert f"sql:{MAX_ACTIONS_PER_POST + 2}" in actions  # the last one stays


def test_stats_made_without_a_context_say_they_count_nothing() -> None:
    stats = ThrottleStats(None, "publish")
    stats.add(1, 1, 0.0)
    assert not stats.counted
    assert repr(stats) == "ThrottleStats(kind='publish', not counted)"
    with pytest.raises(FiguresNotCountedError, match="made without a SparkContext"):
        assert stats.rows


def test_pushback_figures_are_sent_only_when_counted_and_read_back(
    client: ResourceGroupClient,
) -> None:
    worker = _Pending(client, "publish")
    worker.add("sql:1", entry(3, 0, 1))
    worker.send()  # none counted: the post is the plain one
    worker.add("sql:1", [*entry(4, 1, 2), 2, 0.75])
    worker.send()
    read = ServerCount(client, "publish").read()
    assert not worker._without_pushbacks  # the server took them
    assert (read.rows, read.pushbacks, read.pushback_s) == (7, 2, 0.75)
