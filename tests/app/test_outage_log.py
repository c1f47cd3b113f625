"""A failure that repeats is logged when it starts, once a minute while it lasts, and when it
ends: not at every attempt."""

from __future__ import annotations

import logging

import pytest

from app.outage_log import OutageLog
from tests.factories import FakeClock


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_one_line_when_it_starts_and_one_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(1000.0)
    log = OutageLog(logging.getLogger("test.outage"), "could not load", "loaded again", clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        log.succeeded()
        for _ in range(30):  # a second apart, as the reload of the request quotas
            log.failed(ConnectionRefusedError("connection refused\n\tIs the server running?"))
            clock.now += 1
        log.succeeded()
        log.succeeded()
    assert lines(caplog) == [
        "could not load: ConnectionRefusedError: connection refused",
        "loaded again",
    ]
    assert all(record.exc_info is None for record in caplog.records)  # no traceback


def test_a_long_outage_says_so_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(1000.0)
    log = OutageLog(logging.getLogger("test.outage"), "down", "up", repeat_s=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        for _ in range(150):
            log.failed(OSError("refused"))
            clock.now += 1
    assert lines(caplog) == [
        "down: OSError: refused",
        "down: OSError: refused (59 more since the last line)",
        "down: OSError: refused (59 more since the last line)",
    ]


def test_a_new_outage_logs_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(1000.0)
    log = OutageLog(logging.getLogger("test.outage"), "down", "up", clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        log.failed(OSError("a"))
        log.succeeded()
        clock.now += 1
        log.failed(OSError("b"))
    assert lines(caplog) == ["down: OSError: a", "up", "down: OSError: b"]
