"""The dashboard in a real Chromium, against a live server and real rgspark workers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import Page, expect

from tests.conftest import SUPERUSER
from tests.factories import attach, create_group, create_namespace, create_tenant
from tests.ui.conftest import Recording
from tests.ui.harness import DashboardServer, Workload

SignIn = Callable[..., None]

GOLD = "/admin/v2/resourcegroups/etl-gold"


def gold_on_team_a(admin: httpx.Client, **limits: int) -> None:
    """Group etl-gold on tenant team-a (admin role team-a-admin), whose namespace ingest
    role ``job`` produces to."""
    create_group(admin, "etl-gold", **limits)
    create_tenant(admin, "team-a", ["team-a-admin"])
    attach(admin, "team-a", "etl-gold")
    create_namespace(admin, "team-a/ingest", producers=["job"])


def api_calls(recording: Recording, since: int = 0) -> list[tuple[str, str | None]]:
    """The API requests the page made (after the first ``since`` requests), with the
    Authorization header each carried."""
    return [
        (request.url, request.headers.get("authorization"))
        for request in recording.requests[since:]
        if urlsplit(request.url).path.startswith(("/admin/", "/ui/api/"))
    ]


def test_sign_in_keeps_the_token_in_the_tab_and_sends_it(
    page: Page, server: DashboardServer, recording: Recording, sign_in: SignIn
) -> None:
    page.goto("/ui/")
    page.get_by_label("Token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".signin .notice")).to_contain_text("Invalid token")
    expect(page.locator("#nav")).to_be_hidden()

    before = len(recording.requests)
    sign_in(SUPERUSER)
    expect(page.locator("#role")).to_have_text(f"{SUPERUSER} · superuser")
    expect(page.locator("#summary")).to_have_text("")  # no groups yet, and no error
    token = page.evaluate("sessionStorage.getItem('resourcegroups.token')")
    assert token
    calls = api_calls(recording, before)
    assert calls
    assert {header for _, header in calls} == {f"Bearer {token}"}

    page.reload()  # the tab keeps the token
    expect(page.locator("#role")).to_contain_text(SUPERUSER)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Token")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('resourcegroups.token')") is None


def test_group_chart_moves_while_workers_report(
    page: Page, admin: httpx.Client, sign_in: SignIn, workload: Workload
) -> None:
    gold_on_team_a(admin, publishRateInMsgs=300)
    sign_in()
    row = page.locator("tr[data-group='etl-gold']")
    expect(row).to_have_attribute("data-status", "idle")

    # Two workers want 250 msgs/s each from a group of 300: saturated, by demand.
    workload.start("team-a", "ingest", workers=2, rate=250)
    expect(row).to_have_attribute("data-status", "saturated")
    expect(row.locator(".reason")).to_contain_text("Publish msgs: demand")
    expect(row.locator(".reason")).to_contain_text("2 reporters")
    expect(row.locator(".meter[data-dimension='publishRateInMsgs']")).to_contain_text(
        "/ 300 msgs/s"
    )

    row.get_by_role("link", name="etl-gold").click()
    expect(page.locator("#reporters-now")).to_have_text("2")
    member = page.locator("tr[data-namespace='team-a/ingest']")
    expect(member).to_contain_text("tenant's")
    expect(member.locator("td.num")).to_have_text("2")
    chart = page.locator(".chart[data-dimension='publishRateInMsgs']")
    expect(chart).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"))
    usage = page.locator(".chart-card", has=chart).locator(".readout .usage b")
    expect(usage).to_have_text(re.compile(r"^[1-9][\d,.]*K? msgs/s$"))

    # The chart moves: a newer sample arrives and the canvas is drawn again, differently.
    canvas = chart.locator("canvas")
    before = canvas.screenshot()
    last = float(chart.get_attribute("data-last") or 0)
    page.wait_for_function(
        "([element, last]) => Number(element.dataset.last) > last",
        arg=[chart.element_handle(), last],
    )
    assert canvas.screenshot() != before


def test_superuser_changes_a_limit_and_only_that_field_is_sent(
    page: Page, admin: httpx.Client, recording: Recording, sign_in: SignIn
) -> None:
    create_group(admin, "etl-gold", publishRateInMsgs=300, dispatchRateInMsgs=900)
    sign_in()
    page.goto("/ui/#/groups/etl-gold")
    field = page.get_by_label("Publish msgs", exact=True)
    expect(field).to_have_value("300")
    # Meanwhile another superuser changes another field: saving must not undo it.
    changed = admin.put(GOLD, json={"dispatchRateInMsgs": 1200})
    assert changed.status_code == 204, changed.text

    field.fill("-5")
    page.get_by_role("button", name="Save limits").click()
    expect(page.locator(".limits .notice")).to_contain_text("Publish msgs: a whole number")

    field.fill("750")
    page.get_by_role("button", name="Save limits").click()
    expect(page.locator(".limits .notice")).to_have_text("Saved: Publish msgs.")
    group = admin.get(GOLD).json()
    assert (group["publishRateInMsgs"], group["dispatchRateInMsgs"]) == (750, 1200)
    puts = [request for request in recording.requests if request.method == "PUT"]
    assert [json.loads(request.post_data or "") for request in puts] == [{"publishRateInMsgs": 750}]
    expect(page.locator(".limits tr[data-field='publishRateInMsgs'] td.num")).to_have_text(
        "750 msgs/s"
    )
    readout = page.locator(".chart-card", has=page.locator("[data-dimension='publishRateInMsgs']"))
    expect(readout.locator(".readout .limit b")).to_have_text("750 msgs/s")


def test_superuser_attaches_a_group_to_a_namespace(
    page: Page, admin: httpx.Client, sign_in: SignIn
) -> None:
    gold_on_team_a(admin)
    create_group(admin, "etl-silver")
    create_namespace(admin, "team-a/backfill")
    sign_in()
    page.get_by_role("link", name="Namespaces").click()
    backfill = page.locator("tr[data-namespace='team-a/backfill']")
    expect(backfill).to_have_attribute("data-source", "tenant")
    backfill.get_by_label("Group of namespace team-a/backfill").select_option("etl-silver")
    backfill.get_by_role("button", name="Attach").click()
    expect(backfill).to_have_attribute("data-source", "namespace")
    expect(backfill).to_have_attribute("data-group", "etl-silver")
    applied = admin.get("/admin/v2/namespaces/team-a/backfill/resourcegroup?applied=true")
    assert applied.json() == {"resourceGroup": "etl-silver", "source": "namespace"}

    backfill.get_by_role("button", name="Detach").click()
    expect(backfill).to_have_attribute("data-source", "tenant")
    expect(backfill).to_have_attribute("data-group", "etl-gold")


def test_tenant_admin_sees_only_its_tenant_read_only(
    page: Page, admin: httpx.Client, recording: Recording, sign_in: SignIn
) -> None:
    gold_on_team_a(admin, publishRateInMsgs=300)
    create_group(admin, "shared")
    create_group(admin, "secret")
    create_namespace(admin, "team-a/adhoc", group="shared")
    create_tenant(admin, "team-b", ["team-b-admin"])
    create_namespace(admin, "team-b/ml", group="secret")
    responses: list[tuple[int, str]] = []
    page.on("response", lambda response: responses.append((response.status, response.url)))
    sign_in("team-a-admin")
    expect(page.locator("#role")).to_have_text("team-a-admin · tenant admin")
    expect(page.locator("tr[data-group]")).to_have_count(2)
    expect(page.locator("tr[data-group='etl-gold']")).to_be_visible()
    expect(page.locator("tr[data-group='shared']")).to_be_visible()
    expect(page.get_by_role("button", name="Create group")).to_have_count(0)
    expect(page.get_by_role("link", name="Request quotas")).to_be_hidden()

    page.get_by_role("link", name="Namespaces").click()
    expect(page.locator("details.tenant")).to_have_count(1)
    expect(page.locator("details.tenant")).to_have_attribute("data-tenant", "team-a")
    ingest = page.locator("tr[data-namespace='team-a/ingest']")
    expect(ingest).to_have_attribute("data-group", "etl-gold")
    expect(ingest).to_have_attribute("data-source", "tenant")
    expect(page.locator("tr[data-namespace='team-a/adhoc']")).to_have_attribute(
        "data-source", "namespace"
    )
    expect(page.locator("#default-group")).to_have_count(0)
    expect(page.get_by_role("button", name="Attach")).to_have_count(0)

    page.get_by_role("link", name="etl-gold").first.click()
    expect(page.locator(".limits tr[data-field='publishRateInMsgs'] td.num")).to_have_text(
        "300 msgs/s"
    )
    expect(page.locator("#limits-form")).to_have_count(0)
    # It asked only for what the role may read: nothing refused.
    assert [status for status, _ in responses if status >= 400] == []
    assert not [url for url in recording.urls() if "team-b" in url or "secret" in url]


def test_no_request_leaves_the_server(
    page: Page,
    server: DashboardServer,
    admin: httpx.Client,
    recording: Recording,
    sign_in: SignIn,
    workload: Workload,
) -> None:
    gold_on_team_a(admin, publishRateInMsgs=300)
    workload.start("team-a", "ingest", rate=100)
    sign_in()
    expect(page.locator("tr[data-group='etl-gold'] .meter").first).to_be_visible()
    page.goto("/ui/#/groups/etl-gold")
    expect(page.locator(".chart canvas").first).to_be_visible()
    expect(page.locator("#reporters-now")).to_have_text("1")
    page.get_by_role("link", name="Namespaces").click()
    expect(page.locator("tr[data-namespace='team-a/ingest']")).to_be_visible()
    page.get_by_role("link", name="Request quotas").click()
    expect(page.get_by_role("heading", name="Default")).to_be_visible()
    assert recording.errors == []

    page.goto("/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    page.goto("/redoc")
    expect(page.get_by_role("heading", name="ResourceGroups for Spark")).to_be_visible()
    expect(page.get_by_role("link", name="API docs by Redocly")).to_be_visible()
    page.wait_for_load_state("networkidle")  # whatever the docs ask for has been answered

    origin = server.url
    local = [url for url in recording.urls() if url.startswith((origin, f"blob:{origin}"))]
    assert any("/ui/vendor/uplot/" in url for url in local)
    assert any("/ui/vendor/swagger-ui/" in url for url in local)
    assert any("/ui/vendor/redoc/" in url for url in local)
    # Redoc's side menu asks for its maker's logo from a CDN; the page's policy refuses it
    # before it is sent. Nothing else even tries.
    # (A request of this server's that a navigation cut short, the favicon say, stays here.)
    elsewhere = {
        (request.url, request.failure)
        for request in recording.requests
        if not request.url.startswith((origin, f"blob:{origin}"))
    }
    assert elsewhere <= {("https://cdn.redoc.ly/redoc/logo-mini.svg", "csp")}
