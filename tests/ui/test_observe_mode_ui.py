"""The dashboard shows a group in observe mode, with what enforcing would hold back, and a
superuser switches it, against a live server and real rgspark workers."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
from playwright.sync_api import Page, expect

from tests.ui.conftest import Recording
from tests.ui.harness import Workload
from tests.ui.test_dashboard import GOLD, gold_on_team_a

SignIn = Callable[..., None]


def test_an_observed_group_says_what_it_would_hold_back_and_is_switched(
    page: Page, admin: httpx.Client, recording: Recording, sign_in: SignIn, workload: Workload
) -> None:
    gold_on_team_a(admin, publishRateInMsgs=300)
    assert admin.put(f"{GOLD}/mode", json={"mode": "observe"}).status_code == 204
    # Two workers sending 250 msgs/s each, unheld, against a group of 300: 40% over.
    workload.start("team-a", "ingest", workers=2, rate=250)
    sign_in()
    row = page.locator("tr[data-group='etl-gold']")
    badge = row.locator(".badge.observe")
    expect(badge).to_have_text(re.compile(r"^observe · would hold back (3[5-9]|4[0-5])%$"))

    row.get_by_role("link", name="etl-gold").click()
    expect(page.locator("#group-mode")).to_contain_text("observe")
    readout = page.locator(
        ".chart-card", has=page.locator(".chart[data-dimension='publishRateInMsgs']")
    )
    expect(readout.locator(".hold-back")).to_contain_text("would hold back")

    before = len(recording.requests)
    page.get_by_role("button", name="Enforce").click()
    expect(page.locator("#group-mode")).to_be_hidden()
    expect(page.get_by_role("button", name="Observe only")).to_be_visible()
    sent = [r for r in recording.requests[before:] if r.method == "PUT"]
    assert [(r.url.split("/admin/v2/")[1], r.post_data_json) for r in sent] == [
        ("resourcegroups/etl-gold/mode", {"mode": "enforce"})
    ]
    assert admin.get(f"{GOLD}/mode").json() == {"mode": "enforce"}


def test_a_tenant_admin_sees_the_mode_but_cannot_switch_it(
    page: Page, admin: httpx.Client, sign_in: SignIn
) -> None:
    gold_on_team_a(admin, publishRateInMsgs=300)
    assert admin.put(f"{GOLD}/mode", json={"mode": "observe"}).status_code == 204
    sign_in("team-a-admin")
    page.goto("/ui/#/groups/etl-gold")
    expect(page.locator("#group-mode")).to_have_text("observe")
    expect(page.get_by_role("button", name="Enforce")).to_have_count(0)
