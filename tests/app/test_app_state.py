"""The app's state lives as long as the server: its connections are closed when it stops."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import create_app
from app.state import state_of
from tests.conftest import make_settings


def test_the_database_connections_are_closed_at_shutdown(
    database_url: str, secret_key: bytes
) -> None:
    app = create_app(make_settings(database_url, secret_key))
    engine = state_of(app).engine
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        assert engine.pool.checkedin() > 0
    assert engine.pool.checkedin() == 0
