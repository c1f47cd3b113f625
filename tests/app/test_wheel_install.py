"""The server as a wheel install runs it, as the image does: a wheel built from the files the
Docker build context holds, installed with its server extra into a fresh virtual environment,
then `rgadmin migrate` on a new PostgreSQL database and `rgadmin serve` from another directory.

Nothing comes from this checkout or its environment: the fresh environment has no system
site-packages, and pip installs the dependencies the wheel declares from the package index it
is configured with (as `pip install` does for a user, and the Dockerfile).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine

from app.db import sqlalchemy_url
from app.schema_version import read_state
from tests.app.processes import free_port, wait_healthy
from tests.conftest import postgres_database

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY = "data:;base64," + base64.b64encode(b"w" * 32).decode()


def build_context(destination: Path) -> Path:
    """The files the Dockerfile builds from: those `.dockerignore` lets in."""
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    for name in (line[1:].rstrip("/") for line in lines if line.startswith("!")):
        source, target = REPO_ROOT / name, destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(
                source, target, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
            )
        else:
            shutil.copy2(source, target)
    return destination


def clean_environment() -> dict[str, str]:
    """This process's environment without what would point back at the checkout or its
    virtualenv, and without the server's settings."""
    leaks = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {
        key: value
        for key, value in os.environ.items()
        if key not in leaks and not key.startswith("RG_")
    }


def run(command: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, f"{command}:\n{completed.stdout}\n{completed.stderr}"
    return completed


@dataclass(frozen=True)
class Installed:
    wheel: Path
    build_log: str
    bin: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    context = build_context(root / "context")
    env = clean_environment()
    # -v: the build backend's own output, to check it warns of nothing.
    built = run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(root / "dist"), "."],
        cwd=context,
        env=env,
    )
    (wheel,) = (root / "dist").glob("resourcegroups_spark-*.whl")

    environment = root / "venv"
    venv.create(environment, with_pip=False, system_site_packages=False)
    python = environment / "bin" / "python"
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", f"{wheel}[server]"],
        cwd=root,
        env=env,
    )
    return Installed(wheel=wheel, build_log=built.stdout + built.stderr, bin=environment / "bin")


def test_the_wheel_ships_every_migration_and_builds_without_warnings(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    shipped = {Path(name).name for name in names if name.startswith("app/migrations/versions/")}
    in_checkout = {path.name for path in (REPO_ROOT / "migrations" / "versions").glob("*.py")}
    assert shipped == in_checkout
    assert {"app/migrations/env.py", "app/migrations/script.py.mako"} <= names
    assert "app/ui/index.html" in names
    assert not any(name.startswith(("tests/", "benchmarks/", "migrations/")) for name in names)
    metadata = zipfile.ZipFile(installed.wheel).read(
        next(name for name in names if name.endswith(".dist-info/METADATA"))
    )
    assert b"License-Expression: Apache-2.0" in metadata
    # setuptools warns in these words, about the license field or anything else.
    for warning in ("SetuptoolsDeprecationWarning", "BuildBackendWarning", "SetuptoolsWarning"):
        assert warning not in installed.build_log


@pytest.fixture
def database_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.mark.postgresql
def test_the_installed_server_migrates_postgresql_and_serves_from_elsewhere(
    installed: Installed, database_url: str, tmp_path: Path
) -> None:
    env = {**clean_environment(), "RG_DATABASE_URL": database_url, "RG_AUTH_TOKEN_SECRET_KEY": KEY}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = run(
        [
            str(installed.bin / "python"),
            "-c",
            "import app.db; print(app.db.migrations_directory())",
        ],
        cwd=elsewhere,
        env=env,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.bin.parent)

    run([str(installed.bin / "rgadmin"), "migrate"], cwd=elsewhere, env=env)
    engine = create_engine(sqlalchemy_url(database_url))
    with engine.connect() as connection:
        state = read_state(connection)
    engine.dispose()
    assert state.current == state.heads

    served_from = tmp_path / "srv"
    served_from.mkdir()
    port = free_port()
    server = subprocess.Popen(
        [str(installed.bin / "rgadmin"), "serve", "--port", str(port), "--no-access-log"],
        cwd=served_from,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_healthy(url, server) == {"status": "ok"}
        token = run(
            [str(installed.bin / "rgadmin"), "tokens", "create", "--subject", "admin"],
            cwd=elsewhere,
            env=env,
        ).stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        put = httpx.put(
            f"{url}/admin/v2/resourcegroups/rg", json={"dispatchRateInMsgs": 7}, headers=headers
        )
        assert put.status_code == 204, put.text
        got = httpx.get(f"{url}/admin/v2/resourcegroups/rg", headers=headers)
        assert got.json()["dispatchRateInMsgs"] == 7
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=15)
    assert "Traceback" not in stderr
