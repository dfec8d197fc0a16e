"""Browser tests: Playwright drives Debian's chromium against live_server.

Data is made through transitions and services in the test process and committed; the server
thread reads it. Users log in through a planted session cookie (one context per role), except
in the login test, which uses the form. Every page is also photographed at 1280 and 390 px
under ``artifacts/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import io
import re
import uuid

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from audit.models import AuditEvent, EventType
from console.htmx import dom_id
from inbox import vault
from inbox.models import Job, JobState
from tests.console.conftest import NARROW, PASSWORD, WIDE, screenshot
from tests.factories import make_job

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def _vault(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"


def unknown_delete(*, present: bool) -> Job:
    job = make_job("delete", JobState.OUTCOME_UNKNOWN)
    if present:
        content = f"# Note {job.job_id.removeprefix('delete-')}\n"
        vault.save(
            job.vault_path, content=content, provenance_hash=vault.sha256_bytes(content.encode())
        )
    return job


def stuck_run(store: str = "archive"):
    from runs.consolidators import PlannedGroup, PlannedMember
    from runs.transitions import plan_run

    class OneGroup:
        name = "one-group"

        def plan(self, *, store, carry_over):
            return [PlannedGroup("k", (PlannedMember("a.md"), PlannedMember("b.md")))]

    return plan_run(store=store, owner="gone-worker", lease_seconds=3600, consolidator=OneGroup())


def post_from_page(page, url: str, data: dict[str, str]) -> tuple[int, str]:
    """POST the way htmx does (CSRF header from <body hx-headers>), from inside the page."""
    return page.evaluate(
        """async ([url, data]) => {
            const headers = JSON.parse(document.body.getAttribute("hx-headers"));
            headers["HX-Request"] = "true";
            const response = await fetch(url, {method: "POST", headers,
                                               body: new URLSearchParams(data)});
            return [response.status, await response.text()];
        }""",
        [url, data],
    )


def seconds_left(page) -> int:
    text = page.locator("#lease-countdown [data-lease-text]").inner_text()
    match = re.match(r"(\d+) s left", text)
    assert match, text
    return int(match.group(1))


# --- reading --------------------------------------------------------------------------------------


def test_login_with_password_shows_dashboard(anon_page, live_server, role_users):
    page = anon_page
    page.goto(live_server.url + "/reconcile/")
    assert "/login/" in page.url
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/reconcile/")
    assert page.locator(".who").inner_text() == "operator"


def test_dashboard_as_viewer_shows_counts_by_state(browser_pages, live_server):
    make_job("save", JobState.FAILED)
    make_job("save", JobState.SUCCEEDED)
    make_job("save", JobState.SUCCEEDED)
    page = browser_pages("viewer")
    page.goto(live_server.url + "/")
    counts = page.locator("#dashboard-counts")
    assert counts.locator(".tile", has_text="SUCCEEDED").locator(".n").inner_text() == "2"
    assert counts.locator(".tile", has_text="FAILED").locator(".n").inner_text() == "1"


def test_jobs_list_filter_and_sort_change_the_url(browser_pages, live_server):
    failed = make_job("save", JobState.FAILED)
    ready = make_job("save", JobState.READY)
    page = browser_pages("viewer")
    page.goto(live_server.url + "/jobs/")
    page.select_option("#id_state", "FAILED")
    page.wait_for_url(re.compile(r"state=FAILED"))
    table = page.locator("#job-table")
    table.get_by_text(failed.job_id).wait_for()
    assert ready.job_id not in table.inner_text()
    table.locator("thead a[href*='sort=']").first.click()
    page.wait_for_url(re.compile(r"sort="))
    assert "state=FAILED" in page.url


def test_job_detail_lease_countdown_decreases(browser_pages, live_server):
    job = make_job("save", JobState.CLAIMED, lease_seconds=300)
    page = browser_pages("viewer")
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    first = seconds_left(page)
    page.wait_for_timeout(2200)
    assert seconds_left(page) < first


# --- actions --------------------------------------------------------------------------------------


def test_reconcile_unknown_outcome_puts_username_and_reason_in_the_audit_log(
    browser_pages, live_server
):
    job = unknown_delete(present=False)
    page = browser_pages("operator")
    page.goto(live_server.url + "/reconcile/")
    case = page.locator(f"#{dom_id('case', job.job_id)}")
    case.get_by_text("absent: the delete happened").wait_for()
    case.locator("input[name=reason]").fill("probe says the object is gone")
    case.get_by_role("button", name="Confirm deleted").click()
    page.locator(f"#{dom_id('case', job.job_id)}").get_by_text("Confirmed deleted").wait_for()
    assert Job.objects.get(job_id=job.job_id).state == JobState.RECONCILED
    # The queue count and the bulk preview reload themselves after the decision.
    expect(page.locator("#queue-count")).to_have_text("0")
    expect(page.locator("#reconcile-auto")).to_contain_text("the queue is empty")
    screenshot(page, "reconcile-decided-1280")

    page.goto(f"{live_server.url}/audit/?job={job.job_id}&type=RECONCILED")
    row = page.locator("#audit-table tbody tr").first
    assert "operator" in row.inner_text()
    assert "RECONCILED" in row.inner_text()
    # The table previews the detail; the export of the same filter carries all of it.
    export = page.get_by_role("link", name="Export CSV of this filter").get_attribute("href")
    csv_text = page.request.get(live_server.url + export).text()
    assert "probe says the object is gone" in csv_text
    assert "operator" in csv_text


def test_approve_delete_as_approver_while_the_requester_is_refused(browser_pages, live_server):
    job = make_job("delete", JobState.CREATED, requested_by="approver2")
    row_id = f"#{dom_id('approval', job.job_id)}"

    requester = browser_pages("approver2")
    requester.goto(live_server.url + "/approvals/")
    own_row = requester.locator(row_id)
    own_row.get_by_text("someone else must decide").wait_for()
    assert own_row.get_by_role("button", name="Approve").count() == 0
    status, body = post_from_page(
        requester,
        reverse("console:approve_delete", args=[job.job_id]),
        {"request_id": uuid.uuid4().hex, "reason": "my own"},
    )
    assert status == 409
    assert "four eyes" in body
    assert Job.objects.get(job_id=job.job_id).state == JobState.CREATED

    approver = browser_pages("approver")
    approver.goto(live_server.url + "/approvals/")
    row = approver.locator(row_id)
    row.locator("input[name=reason]").fill("duplicate copy, safe to drop")
    row.get_by_role("button", name="Approve").click()
    approver.locator(row_id).get_by_text("Approved").wait_for()
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY
    event = AuditEvent.objects.get(job_id=job.job_id, event_type=EventType.APPROVED)
    assert (event.actor, event.detail["reason"]) == ("approver", "duplicate copy, safe to drop")


def test_close_stuck_run_as_operator(browser_pages, live_server):
    from runs.models import Run, RunStatus

    run = stuck_run("archive")
    page = browser_pages("operator")
    page.goto(live_server.url + "/runs/")
    card = page.locator(f"#{dom_id('store', 'archive')}")
    card.locator("input[name=reason]").fill("owner host was decommissioned")
    card.get_by_role("button", name="Close stuck run").click()
    page.locator(f"#{dom_id('store', 'archive')}").get_by_text("closed as abandoned").wait_for()
    run.refresh_from_db()
    assert (run.status, run.closed_by) == (RunStatus.ABANDONED, "operator")
    assert not Run.objects.filter(store="archive", status=RunStatus.ACTIVE).exists()


def test_pause_scope_as_operator(browser_pages, live_server):
    from inbox.scopes import pause_of

    page = browser_pages("operator")
    page.goto(live_server.url + "/workers/")
    scope = page.locator(f"#{dom_id('scope', 'save')}")
    scope.locator("input[name=reason]").fill("vault disk is being replaced")
    scope.get_by_role("button", name="Pause save").click()
    page.locator(f"#{dom_id('scope', 'save')}").get_by_role("button", name="Resume save").wait_for()
    pause = pause_of("save")
    assert (pause.changed_by, pause.reason) == ("operator", "vault disk is being replaced")


def _snapshot() -> tuple:
    from inbox.models import ScopePause
    from runs.models import Run

    return (
        sorted(Job.objects.values_list("job_id", "state", "result_code")),
        AuditEvent.objects.count(),
        sorted(Run.objects.values_list("run_id", "status")),
        sorted(ScopePause.objects.values_list("scope", "paused")),
    )


def test_viewer_gets_403_on_every_action_and_nothing_changes(browser_pages, live_server):
    gone = unknown_delete(present=False)
    pending = make_job("delete", JobState.CREATED, requested_by="operator")
    failed = make_job("save", JobState.FAILED)
    run = stuck_run("archive")
    before = _snapshot()
    page = browser_pages("viewer")
    page.goto(live_server.url + "/reconcile/")
    # The viewer sees the evidence but no decision buttons.
    page.get_by_text("absent: the delete happened").wait_for()
    assert page.get_by_role("button", name="Confirm deleted").count() == 0

    actions = [
        reverse("console:reconcile_confirm_deleted", args=[gone.job_id]),
        reverse("console:reconcile_not_applied", args=[gone.job_id]),
        reverse("console:reconcile_annotate", args=[gone.job_id]),
        reverse("console:reconcile_auto"),
        reverse("console:approve_delete", args=[pending.job_id]),
        reverse("console:deny_delete", args=[pending.job_id]),
        reverse("console:close_run", args=[run.run_id]),
        reverse("console:pause_scope", args=["save"]),
        reverse("console:resume_scope", args=["save"]),
        reverse("console:job_retry", args=[failed.job_id]),
        reverse("console:bulk_retry"),
        reverse("console:bulk_reconcile"),
    ]
    for url in actions:
        status, body = post_from_page(
            page, url, {"request_id": uuid.uuid4().hex, "reason": "viewer tries"}
        )
        assert (url, status) == (url, 403)
        assert "Not allowed" in body
    # And through htmx itself: the 403 is rendered into the region it targets.
    case_id = dom_id("case", gone.job_id)
    page.evaluate(
        """([url, target]) => htmx.ajax("POST", url, {target: target, swap: "outerHTML",
             values: {request_id: "0123456789abcdef", reason: "viewer tries"}})""",
        [reverse("console:reconcile_confirm_deleted", args=[gone.job_id]), f"#{case_id}"],
    )
    page.locator(".forbidden").get_by_text("inbox.reconcile_job").wait_for()
    screenshot(page, "reconcile-viewer-forbidden-1280")
    assert _snapshot() == before


# --- screenshots --------------------------------------------------------------------------------


def test_screenshots_of_every_page_at_1280_and_390(
    browser_pages, anon_page, live_server, monkeypatch
):
    from django.core.management import call_command

    monkeypatch.setenv("DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=io.StringIO())
    held = Job.objects.get(job_id="seed-save-changelog")
    pages = {
        "dashboard": "/",
        "jobs": "/jobs/",
        "job-detail": f"/jobs/{held.job_id}/",
        "reconcile": "/reconcile/",
        "approvals": "/approvals/",
        "runs": "/runs/",
        "workers": "/workers/",
        "audit": "/audit/",
    }
    anon_page.goto(live_server.url + "/login/")
    screenshot(anon_page, "login-1280")
    anon_page.set_viewport_size(NARROW)
    screenshot(anon_page, "login-390")
    for size, suffix in ((WIDE, "1280"), (NARROW, "390")):
        for name, path in pages.items():
            user = "approver" if name == "approvals" else "operator"
            page = browser_pages(user, viewport=size)
            response = page.goto(live_server.url + path)
            assert response.status == 200, path
            page.locator("main h1").wait_for()
            screenshot(page, f"{name}-{suffix}")
            page.close()
