"""Fixtures of the quota tests: server processes' worth of apps on one database, on one
clock that the tests move."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine

from app.main import create_app
from app.state import state_of
from tests.conftest import make_settings
from tests.factories import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def servers(
    database_url: str, secret_key: bytes, engine: Engine, clock: FakeClock
) -> Iterator[list[FastAPI]]:
    """Two server processes' worth of apps on one database, sharing one clock."""
    apps = [create_app(make_settings(database_url, secret_key), clock=clock) for _ in range(2)]
    yield apps
    for app in apps:
        state_of(app).engine.dispose()
