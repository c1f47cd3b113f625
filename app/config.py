"""Settings, read from the environment with the ``RG_`` prefix."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DATA_DIR = Path("data")
DEFAULT_DATABASE_URL = f"sqlite:///{DATA_DIR / 'resourcegroups.db'}"
# Where `rgadmin serve` keeps the secret key it generates on a first run without configuration.
DEFAULT_SECRET_KEY_FILE = DATA_DIR / "secret.key"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RG_", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="A plain sqlite:///PATH or postgresql://user@host:port/db URL.",
    )
    auth_enabled: bool = True
    auth_token_secret_key: str | None = Field(
        None, description="HS256 key, as Pulsar takes it: file:///path or data:;base64,..."
    )
    auth_token_public_key: str | None = Field(
        None,
        description="RS256/ES256 public key, as Pulsar takes it: file:///path or data:;base64,...",
    )
    superuser_roles: str = Field("admin", description="Comma-separated roles allowed everything.")
    report_interval_seconds: float = Field(
        1.0, gt=0, le=3600, description="How often rgspark reporters report usage."
    )
    max_reporters_per_namespace: int = Field(
        10_000,
        ge=1,
        description="Live reporter ids one role may have in one namespace (superusers are "
        "exempt): each worker process is one, and a cluster of 500 executors runs 4,000.",
    )
    usage_history_resolution_seconds: float = Field(
        10.0, gt=0, le=300, description="How often each group's usage is sampled for its history."
    )
    usage_history_retention_seconds: float = Field(
        3600.0, gt=0, le=7 * 86400, description="How long a group's usage history is kept."
    )
    cluster_name: str = Field(
        "standalone",
        pattern=r"^[A-Za-z0-9_=:.\-]{1,255}$",
        description="The one cluster `GET /admin/v2/clusters` lists, for Pulsar tools that ask.",
    )

    @field_validator("auth_token_secret_key", "auth_token_public_key")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @property
    def superusers(self) -> frozenset[str]:
        return frozenset(role.strip() for role in self.superuser_roles.split(",") if role.strip())


@lru_cache
def get_settings() -> Settings:
    return Settings()
