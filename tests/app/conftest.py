"""Fixtures of the quota tests: server processes' worth of apps on one database, on one
clock that the tests move."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine

from tests.conftest import make_settings
from tests.factories import FakeClock, running_app


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def servers(
    database_url: str, secret_key: bytes, engine: Engine, clock: FakeClock
) -> Iterator[list[FastAPI]]:
    """Two server processes' worth of apps on one database, sharing one clock."""
    with ExitStack() as stack:
        settings = make_settings(database_url, secret_key)
        yield [stack.enter_context(running_app(settings, clock=clock)) for _ in range(2)]
