"""Settings print without their secrets: repr() and str() reach logs and tracebacks."""

from __future__ import annotations

import base64

import pytest

from app.auth import load_key
from app.config import Settings

KEY = base64.b64encode(b"k" * 32).decode()


@pytest.mark.parametrize("show", [repr, str])
def test_a_data_key_and_database_passwords_never_show(show: object) -> None:
    settings = Settings(
        database_url="postgresql://rg:s3cr%40t@db:5432/rg?sslmode=require&password=0th3r",
        auth_token_secret_key=f"data:;base64,{KEY}",
    )
    shown = show(settings)  # type: ignore[operator]
    for secret in (KEY, "s3cr%40t", "0th3r"):
        assert secret not in shown
    assert "postgresql://rg:**********@db:5432/rg?sslmode=require&password=**********" in shown
    assert "auth_token_secret_key='**********'" in shown


def test_the_values_themselves_are_untouched() -> None:
    url = "postgresql://rg:s3cret@db:5432/rg"
    settings = Settings(database_url=url, auth_token_secret_key=f"data:;base64,{KEY}")
    assert settings.database_url == url
    assert load_key(settings.auth_token_secret_key or "") == b"k" * 32


@pytest.mark.parametrize(
    "url", ["sqlite:///data/resourcegroups.db", "postgresql://rg@db/rg", "postgresql:///rg"]
)
def test_what_is_not_secret_shows_as_given(url: str) -> None:
    shown = repr(Settings(database_url=url, auth_token_secret_key="file:///etc/rg/secret.key"))
    assert f"database_url='{url}'" in shown
    assert "auth_token_secret_key='file:///etc/rg/secret.key'" in shown
