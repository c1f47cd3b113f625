"""The README and the documentation site: the README stays short and points at the pages,
every page is in the site's nav, the quick start's shell blocks run as written (twice, as a
reader who starts over runs them), and the site loads nothing from the network.

``make docs`` builds the site with ``--strict`` (a broken link or anchor fails it) and then
runs `scripts/check_site_offline.py` on it; the tests of that checker are here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from scripts.check_site_offline import remote_loads
from tests.app.processes import free_port
from tests.docs import DOCS, DOCS_URL, ROOT, code_blocks

README = ROOT / "README.md"
RGADMIN = str(Path(sys.executable).with_name("rgadmin"))


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    first = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert first is not None
    assert first[1].splitlines() == [
        "make serve   # the admin server on http://127.0.0.1:8080, secured, on an embedded "
        "SQLite database",
        "make test    # the whole test suite (SQLite and the PostgreSQL on 127.0.0.1:5432)",
    ]


def test_the_readme_shows_what_the_tested_pages_run() -> None:
    """The README's tour and Spark example are the quick start's and the Spark guide's, which
    the tests here and in tests/spark/test_guide.py run."""
    [_, tour] = code_blocks(README, "sh")[:2]
    shown = {
        line for block in code_blocks(DOCS / "quickstart.md", "sh") for line in block.splitlines()
    }
    assert {line for line in tour.splitlines() if line} <= shown
    assert code_blocks(README, "python") == code_blocks(DOCS / "spark.md", "python")[:1]


def nav_pages() -> list[str]:
    """Every page mkdocs.yml's nav names, in order."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages: list[str] = []
    todo = list(config["nav"])
    while todo:
        entry = todo.pop(0)
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            todo[:0] = value
        else:
            pages.append(value)
    return pages


def test_every_page_is_in_the_nav_and_the_readme_links_to_them() -> None:
    pages = sorted(path.name for path in DOCS.glob("*.md"))
    assert sorted(nav_pages()) == pages
    linked = set(re.findall(r"\]\(docs/([a-z]+\.md)", README.read_text()))
    assert linked == set(pages) - {"index.md"}


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[str]:
    """``rgadmin serve`` as ``make serve`` runs it, in `directory`, with no RG_ settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    port = free_port()
    process = subprocess.Popen(
        [RGADMIN, "serve", "--port", str(port), "--no-access-log"],
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the server did not come up")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)


def test_the_quick_start_tour_runs_twice_as_written(tmp_path: Path) -> None:
    blocks = code_blocks(DOCS / "quickstart.md", "sh")
    assert len(blocks) == 3  # the token, the tour, the clean-up
    script = "".join(blocks)
    assert script.count(DOCS_URL) == 1
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {key: value for key, value in os.environ.items() if not key.startswith("RG_")}
    env["NO_PROXY"] = "127.0.0.1"

    with serving(tmp_path) as url:
        for _ in range(2):
            run = subprocess.run(
                ["sh", "-eu", "-c", script.replace(DOCS_URL, url)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert run.returncode == 0, (run.stdout, run.stderr)
            assert '"etl-gold"' in run.stdout.splitlines()
            assert '"publishRateInMsgs":2000' in run.stdout
            assert run.stderr == ""
        admin = subprocess.run(
            [RGADMIN, "tokens", "create", "--subject", "admin"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        headers = {"Authorization": f"Bearer {admin}"}
        assert httpx.get(f"{url}/admin/v2/resourcegroups", headers=headers).json() == []
        assert httpx.get(f"{url}/admin/v2/tenants", headers=headers).json() == []


def test_the_offline_check_finds_what_a_page_would_load_from_the_network(
    tmp_path: Path,
) -> None:
    (tmp_path / "page.html").write_text(
        '<link rel="stylesheet" href="assets/main.css">'
        '<script src="assets/bundle.js"></script>'
        '<a href="https://github.com/apache/pulsar">a link a reader follows</a>'
        '<script src="https://unpkg.com/iframe-worker/shim"></script>'
        '<link rel="preconnect stylesheet" href="//fonts.googleapis.com/css?family=Roboto">'
        '<style>@import "https://cdn.example/x.css";</style>'
    )
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "main.css").write_text(
        "@font-face{src:url(fonts/roboto.woff2)}"
        "@font-face{src:url('https://fonts.gstatic.com/s/roboto.woff2')}"
    )

    assert remote_loads(tmp_path) == [
        "assets/main.css: https://fonts.gstatic.com/s/roboto.woff2",
        "page.html: https://unpkg.com/iframe-worker/shim",
        "page.html: //fonts.googleapis.com/css?family=Roboto",
        "page.html: https://cdn.example/x.css",
    ]
