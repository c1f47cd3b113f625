"""Settings, read from the environment with the ``RG_`` prefix."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DATA_DIR = Path("data")
DEFAULT_DATABASE_URL = f"sqlite:///{DATA_DIR / 'resourcegroups.db'}"
# Where `rgadmin serve` keeps the secret key it generates on a first run without configuration.
DEFAULT_SECRET_KEY_FILE = DATA_DIR / "secret.key"
KIB = 1024
MIB = 1024 * KIB


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
    report_lease_seconds: float = Field(
        8.0,
        gt=0,
        le=3600,
        description="How long a steady reporter's answer holds before it reports again "
        "(changes to its share are pushed to it at once whatever its lease); at least the "
        "report interval. Also how long a worker that died without releasing holds its share.",
    )
    max_reporters_per_namespace: int = Field(
        10_000,
        ge=1,
        description="Live reporter ids one role may have in one namespace (superusers are "
        "exempt): each worker process is one, and a cluster of 500 executors runs 4,000.",
    )
    report_cache_namespaces: int = Field(
        1_000_000,
        ge=1,
        description="Namespaces of recent reporters that a server process remembers between "
        "reports, summed over reporters (about 1.4 KB each); past it the least recently "
        "reporting are forgotten, and their next reports read their rows again.",
    )
    usage_history_resolution_seconds: float = Field(
        10.0, gt=0, le=300, description="How often each group's usage is sampled for its history."
    )
    usage_history_retention_seconds: float = Field(
        3600.0, gt=0, le=7 * 86400, description="How long a group's usage history is kept."
    )
    job_figures_retention_seconds: float = Field(
        86400.0,
        gt=0,
        le=365 * 86400,
        description="How long a job's figures (what its tasks moved through the throttle, "
        "which a Spark Connect driver reads back) are kept after their last update.",
    )
    max_body_bytes: int = Field(
        4 * MIB,
        ge=1024,
        description="Largest request body (admin bodies are a few hundred bytes); past it, 413.",
    )
    max_report_body_bytes: int = Field(
        16 * MIB,
        ge=1024,
        description="Largest usage report body: one of 10,000 namespaces with the longest "
        "names and figures is 7.9 MiB as compact JSON, 9.3 MiB indented.",
    )
    body_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="Time a request's whole body may take to arrive; 408."
    )
    max_request_headers: int = Field(
        100, ge=10, le=10_000, description="Most header lines a request may carry; past it, 431."
    )
    max_header_bytes: int = Field(
        32 * KIB,
        ge=1024,
        description="Most bytes of header names and values a request may carry; past it, 431.",
    )
    authenticate_metrics_endpoint: bool = Field(
        False,
        description="Whether /metrics needs a token of a superuser or of a metrics role, as "
        "Pulsar's authenticateMetricsEndpoint (with authentication on).",
    )
    metrics_roles: str = Field(
        "", description="Comma-separated roles that may read /metrics besides superusers."
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

    @property
    def metrics_readers(self) -> frozenset[str]:
        return frozenset(role.strip() for role in self.metrics_roles.split(",") if role.strip())

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # repr() and str() end up in logs and tracebacks: never with a key's bytes or a
        # database password. A file:// key is only where the key is, and shown.
        for name, value in super().__repr_args__():
            if name == "database_url":
                value = _without_password(value)
            elif name == "auth_token_secret_key" and value and not value.startswith("file:"):
                value = HIDDEN
            yield name, value


HIDDEN = "**********"


def _without_password(url: str) -> str:
    """``url`` with its password, in the authority or the query, replaced by HIDDEN."""
    return _PASSWORD.sub(
        lambda match: f"{match['user']}:{HIDDEN}@" if match["user"] is not None else HIDDEN, url
    )


# user:password@ right after the scheme, or the value of a password= query field.
_PASSWORD = re.compile(r"(?<=://)(?P<user>[^/?#@:]*):[^/?#@]*@|(?<=[?&]password=)[^&#]*")


@lru_cache
def get_settings() -> Settings:
    return Settings()
