"""Starting and stopping the servers the benchmarks measure, as real processes."""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import make_url

HOST = "127.0.0.1"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0


@dataclass
class Server:
    name: str
    command: list[str]
    cwd: Path
    port: int
    ready_path: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def cpu_seconds(self) -> float | None:
        return None if self.process is None else process_tree_cpu_seconds(self.process.pid)

    def worker_cpu_seconds(self) -> dict[int, float]:
        """CPU seconds of each process the server's own started (its ``--workers``), by
        pid: whether the load reached each. Empty for a server without such processes."""
        if self.process is None:
            return {}
        seconds: dict[int, float] = {}
        for child in _children(self.process.pid):
            with contextlib.suppress(OSError):
                # Not multiprocessing's own helper, which uvicorn's workers come with.
                if b"resource_tracker" in Path(f"/proc/{child}/cmdline").read_bytes():
                    continue
            cpu = process_tree_cpu_seconds(child)
            if cpu is not None:
                seconds[child] = cpu
        return seconds


# processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env() -> dict[str, str]:
    # The README's defaults are what is measured: no RG_* setting may leak in from the caller.
    return {name: value for name, value in os.environ.items() if not name.startswith("RG_")}


def server_env(database_url: str, secret_key: bytes, superuser: str) -> dict[str, str]:
    """`clean_env` for ``rgadmin`` on ``database_url``, trusting tokens signed with
    ``secret_key`` (HS256) and taking ``superuser`` as its superuser role."""
    return {
        **clean_env(),
        "RG_DATABASE_URL": database_url,
        "RG_AUTH_TOKEN_SECRET_KEY": "data:;base64," + base64.b64encode(secret_key).decode(),
        "RG_SUPERUSER_ROLES": superuser,
    }


def rgadmin() -> list[str]:
    script = Path(sys.executable).parent / "rgadmin"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def start(server: Server, env: dict[str, str]) -> None:
    with server.log.open("wb") as log:
        # A session of its own, so stopping it stops every worker it forked.
        server.process = subprocess.Popen(
            server.command,
            cwd=server.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(server: Server) -> None:
    process = server.process
    if process is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_TIMEOUT_SECONDS)
    # Workers that outlived their parent, or a parent that ignored SIGTERM.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def log_tail(server: Server, lines: int = 30) -> str:
    try:
        text = server.log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(server: Server, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    assert server.process is not None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} server exited with {server.process.returncode}:\n"
                + log_tail(server)
            )
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, _ = http_request(server.port, "GET", server.ready_path, headers=headers)
            if status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(
        f"{server.name} server not ready in {READY_TIMEOUT_SECONDS}s:\n" + log_tail(server)
    )


def rgadmin_server(workdir: Path, name: str, workers: int = 1) -> Server:
    """``rgadmin serve`` on a free port, run in ``workdir`` (made if missing), not started."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    return Server(
        name=name,
        command=[
            *rgadmin(),
            *("serve", "--host", HOST, "--port", str(port)),
            *("--workers", str(workers), "--no-access-log"),
        ],
        cwd=workdir,
        port=port,
        ready_path="/health",
        log=workdir / f"{name}.log",
    )


def serve_rgadmin(workdir: Path, name: str, env: dict[str, str], workers: int = 1) -> Server:
    """``rgadmin serve --workers N`` (one process by default) on a free port, ready; stopped
    again if it never is."""
    server = rgadmin_server(workdir, name, workers)
    start(server, env)
    try:
        wait_ready(server)
    except BaseException:
        stop(server)
        raise
    return server


def http_request(
    port: int,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def process_tree_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of ``pid`` and its descendants, from /proc (None elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    pending = [pid]
    try:
        while pending:
            current = pending.pop()
            stat = Path(f"/proc/{current}/stat").read_text()
            # Fields after the command name, which may itself contain spaces or parentheses.
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            pending += _children(current)
    except (OSError, ValueError, IndexError):
        return None
    return total / ticks


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started that are still running, from /proc."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


def _run_rgadmin(
    workdir: Path, env: dict[str, str], command: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*rgadmin(), command],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_SECONDS,
    )


def migrate_rgadmin(workdir: Path, env: dict[str, str]) -> None:
    """``rgadmin migrate`` on ``env``'s ``RG_DATABASE_URL``; its output in the error if it fails."""
    completed = _run_rgadmin(workdir, env, "migrate")
    if completed.returncode != 0:
        raise RuntimeError(
            f"rgadmin migrate exited with {completed.returncode}:\n"
            + (completed.stderr or completed.stdout)[-3000:]
        )


def store_check(workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    """``rgadmin check`` on ``env``'s ``RG_DATABASE_URL``: whether the store holds what the
    quota bound rests on, and the lines it printed (one per violation)."""
    completed = _run_rgadmin(workdir, env, "check")
    lines = (completed.stdout + completed.stderr).strip().splitlines()
    return {"ok": completed.returncode == 0, "exit_code": completed.returncode, "lines": lines[:20]}


@contextlib.contextmanager
def postgres_database(server_url: str, prefix: str) -> Iterator[tuple[str, str]]:
    """A new, empty database on the PostgreSQL server ``server_url`` names: (its URL, the
    server's version). Dropped afterwards, also on errors."""
    server = make_url(server_url).set(drivername="postgresql")
    admin = server.render_as_string(hide_password=False)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            row = connection.execute("SHOW server_version").fetchone()
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL at {server_url} is needed and not reachable: {exc}"
        ) from exc
    try:
        yield server.set(database=name).render_as_string(hide_password=False), str(row and row[0])
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
