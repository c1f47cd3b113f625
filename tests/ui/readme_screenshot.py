"""Take the README's picture of the dashboard: ``python -m tests.ui.readme_screenshot [PNG]``.

A live server on a throwaway SQLite database, real rgspark workers in three tenants'
namespaces for about two and a half minutes (a second job joins the first, then a superuser
raises the group's limit), and Debian's Chromium. The picture is the group list above the
busiest group's page; by default it is written to ``docs/dashboard.png``.
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

from tests.conftest import SUPERUSER
from tests.factories import attach, create_group, create_namespace, create_tenant, set_default_group
from tests.ui.conftest import CHROMIUM
from tests.ui.harness import DashboardServer, Workload, dashboard_server

DEST = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
WIDTH = 1400
# The scene: seconds after the first workers start.
SECOND_JOB_S = 45
RAISE_S = 95
PICTURE_S = 150


def stage(admin: httpx.Client) -> None:
    create_group(admin, "etl-gold", publishRateInMsgs=1000)
    create_group(admin, "etl-silver", publishRateInMsgs=400)
    create_group(admin, "sandbox", publishRateInMsgs=2000)
    create_group(admin, "archive", dispatchRateInBytes=52428800)
    for tenant in ("team-a", "team-b", "lab"):
        create_tenant(admin, tenant, [tenant])
    attach(admin, "team-a", "etl-gold")
    attach(admin, "team-b", "etl-silver")
    set_default_group(admin, "sandbox")
    for namespace in ("team-a/ingest", "team-a/backfill", "team-b/ml", "lab/notebooks"):
        create_namespace(admin, namespace, producers=["job"])
    attach(admin, "team-a/backfill", "etl-gold")


def until(start: float, second: float) -> None:
    time.sleep(max(0.0, start + second - time.monotonic()))


def picture(page: Page, server: DashboardServer, dest: Path) -> None:
    page.goto(f"{server.url}/ui/")
    page.get_by_label("Token").fill(server.token(SUPERUSER))
    page.get_by_role("button", name="Sign in").click()
    page.locator("tr[data-group='etl-gold'][data-status]").wait_for()
    groups = page.screenshot(
        clip={"x": 0, "y": 0, "width": WIDTH, "height": _bottom(page, ".panel")}
    )
    page.goto(f"{server.url}/ui/#/groups/etl-gold")
    chart = page.locator(".chart[data-points]").first
    chart.wait_for()
    last = float(chart.get_attribute("data-last") or 0)
    page.get_by_role("button", name="5 min", exact=True).click()
    # A sample newer than the one drawn before the click: drawn over the 5 minutes.
    page.wait_for_function(
        "([element, last]) => Number(element.dataset.last) > last",
        arg=[chart.element_handle(), last],
    )
    group = page.screenshot(
        clip={"x": 0, "y": 0, "width": WIDTH, "height": _bottom(page, ".chart-card")}
    )
    # One picture: the list above the group's page, drawn by the browser itself.
    images = "".join(
        f'<img src="data:image/png;base64,{base64.b64encode(shot).decode()}">'
        for shot in (groups, group)
    )
    page.set_content(
        "<style>body{margin:0;background:#8a96a6}img{display:block;margin-bottom:6px}</style>"
        + images
    )
    page.screenshot(path=str(dest), full_page=True)


def _bottom(page: Page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None
    return box["y"] + box["height"] + 10


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", nargs="?", type=Path, default=DEST)
    dest: Path = parser.parse_args(argv).dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as directory,
        dashboard_server(Path(directory)) as server,
        Workload(server.url, server.token("job")) as workload,
        server.api() as admin,
        sync_playwright() as playwright,
    ):
        stage(admin)
        start = time.monotonic()
        workload.start("team-a", "ingest", workers=2, rate=350)
        workload.start("team-b", "ml", workers=1, rate=330)
        workload.start("lab", "notebooks", workers=1, rate=120)
        until(start, SECOND_JOB_S)
        workload.start("team-a", "backfill", workers=3, rate=250)
        until(start, RAISE_S)
        raised = admin.put("/admin/v2/resourcegroups/etl-gold", json={"publishRateInMsgs": 1500})
        assert raised.status_code == 204, raised.text
        until(start, PICTURE_S)
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        picture(browser.new_page(viewport={"width": WIDTH, "height": 1000}), server, dest)
        browser.close()
    sys.stderr.write(f"wrote {dest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
