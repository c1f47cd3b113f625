"""The Spark guide's examples, run as written: its shell block (a role granted, its token
minted) and its Python blocks, one after another in one driver as a reader runs them, against
a real server and a real HTTP service for the examples that call one.

The commands run from a folder laid out as this repository is after ``make serve`` and
``make client``: ``.venv`` and ``.venv-client`` are the Python running these tests. Only the
addresses differ: the test's server and service listen on ports of their own. The
spark-submit block is `tests.spark.test_example`'s.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.docs import DOCS, DOCS_URL, code_blocks
from tests.factories import create_group, create_namespace, create_tenant
from tests.spark.submit import PASSED_ON

if TYPE_CHECKING:
    from tests.spark.conftest import RGServer

pytestmark = pytest.mark.spark

GUIDE = DOCS / "spark.md"
GUIDE_SERVICE = "https://ingest.example.com/rows"  # the guide's API_URL
RATE = 2000  # etl-gold's publishRateInMsgs in the quick start's tour


class Service:
    """An HTTP service on 127.0.0.1 that notes the rows POSTed to it (a JSON list) and the
    GETs it answers, as they arrive."""

    def __init__(self) -> None:
        self.posts: list[tuple[float, int]] = []  # (monotonic seconds, rows)
        self.gets = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                rows = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.posts.append((time.monotonic(), len(rows)))
                self.send_response(204)
                self.end_headers()

            def do_GET(self) -> None:
                service.gets += 1
                body = b"x" * 1000
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rows"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service() -> Iterator[Service]:
    running = Service()
    yield running
    running.close()


def granted(server: RGServer, directory: Path) -> dict[str, str]:
    """The guide's shell block, run in `directory`: the environment it leaves for the driver."""
    [block] = [block for block in code_blocks(GUIDE, "sh") if "spark-submit" not in block]
    assert block.count(DOCS_URL) == 1
    env = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    # What `make serve` leaves in data/secret.key, given as the setting instead.
    env["RG_AUTH_TOKEN_SECRET_KEY"] = "data:;base64," + base64.b64encode(server.secret_key).decode()
    script = (
        block.replace(DOCS_URL, server.url) + 'printf "%s\\n%s\\n" "$JOB_TOKEN" "$PYSPARK_PYTHON"\n'
    )
    run = subprocess.run(
        ["sh", "-eu", "-c", script], cwd=directory, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    job_token, python = run.stdout.splitlines()[-2:]
    assert python == f"{directory}/.venv-client/bin/python"
    del env["RG_AUTH_TOKEN_SECRET_KEY"]
    return {**env, "JOB_TOKEN": job_token, "PYSPARK_PYTHON": python}


def test_the_guide_examples_run_as_written(
    own_server: tuple[RGServer, ExitStack], service: Service, tmp_path: Path
) -> None:
    server, _ = own_server
    # The quick start's tour, before its clean-up.
    create_group(
        server.admin,
        "etl-gold",
        publishRateInMsgs=RATE,
        publishRateInBytes=10485760,
        dispatchRateInMsgs=500,
    )
    create_tenant(server.admin, "team-a", ["team-a"])
    create_namespace(server.admin, "team-a/ingest", group="etl-gold")
    for venv in (".venv", ".venv-client"):
        (tmp_path / venv).symlink_to(Path(sys.prefix))
    env = granted(server, tmp_path)
    script = "\n".join(code_blocks(GUIDE, "python"))
    assert script.count(DOCS_URL) == 1 and script.count(GUIDE_SERVICE) == 1

    run = subprocess.run(
        [
            env["PYSPARK_PYTHON"],
            "-c",
            script.replace(DOCS_URL, server.url).replace(GUIDE_SERVICE, service.url),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )

    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-5000:])
    check, last = run.stdout.strip().splitlines()[:2]
    assert "'resourceGroup': 'etl-gold'" in check, check
    assert "rows=20000" in last, last
    # throttled (mapInPandas) and throttled_sink each post the 20,000 rows, held to the
    # group's rate: ten seconds each at least, give or take a slice (and the second job's
    # start between them).
    assert sum(rows for _, rows in service.posts) == 2 * 20_000
    span = service.posts[-1][0] - service.posts[0][0]
    assert 0.85 * 2 * 20_000 / RATE <= span <= 120, span
    assert service.gets == 100  # ThrottledReader's reads
