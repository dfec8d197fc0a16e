"""Browser tests of an operator's everyday flows (Playwright, Debian's chromium, against
live_server): lists that change in place and poll only while visible, cards on a phone, stuck
runs and orphaned jobs flagged, errors shown in place, bulk actions with a preview, search,
charts and times — each at 1280 and 390 px, with screenshots under
``artifacts/screenshots/flow-*``.

Data is made through transitions and services in the test process and committed; the server
thread reads it. Changes made here while a page is open are what a worker would do: the page
must notice them by itself.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from console.htmx import dom_id
from inbox import transitions
from inbox.models import Job, JobState, Worker
from inbox.workers import register_worker
from tests.console.conftest import NARROW, WIDE, screenshot
from tests.factories import WORKER, make_job

pytestmark = [pytest.mark.browser]

SIZES = [pytest.param(WIDE, id="1280"), pytest.param(NARROW, id="390")]


@pytest.fixture(autouse=True)
def _vault(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"


def _size(viewport: dict) -> str:
    return str(viewport["width"])


def _stuck_run(store: str = "archive"):
    from runs.consolidators import PlannedGroup, PlannedMember
    from runs.transitions import plan_run

    class OneGroup:
        name = "one-group"

        def plan(self, *, store, carry_over):
            return [PlannedGroup("k", (PlannedMember("a.md"), PlannedMember("b.md")))]

    return plan_run(store=store, owner="gone-worker", lease_seconds=3600, consolidator=OneGroup())


def _dead_executor(worker_id: str) -> None:
    register_worker(worker_id=worker_id, kind="executor", scope="save", lease_seconds=5)
    Worker.objects.filter(worker_id=worker_id).update(
        last_seen_at=transitions.db_now() - dt.timedelta(minutes=5)
    )


def _requests(page, fragment: str) -> list[str]:
    seen: list[str] = []
    page.on(
        "request", lambda request: seen.append(request.url) if fragment in request.url else None
    )
    return seen


def _no_horizontal_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width


def _nav_fits(page) -> None:
    boxes = [link.bounding_box() for link in page.locator("nav.nav a").all()]
    assert boxes and all(box is not None for box in boxes)
    right = page.viewport_size["width"]
    assert all(box["x"] >= 0 and box["x"] + box["width"] <= right for box in boxes), boxes


# --- the jobs list --------------------------------------------------------------------------------


def test_jobs_list_at_1280_shows_key_columns_and_rows_change_in_place(browser_pages, live_server):
    kept = make_job("save", JobState.READY, object_id="note-with-a-rather-long-object-identifier")
    moving = make_job("save", JobState.CLAIMED, lease_seconds=120)
    for _ in range(8):
        make_job("noop")
    page = browser_pages("operator")
    page.goto(live_server.url + "/jobs/")
    table = page.locator("table.jobs")
    for name in ("State", "Type", "Object", "Lease", "Updated"):
        box = table.locator("thead th", has_text=re.compile(f"^{name}")).bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDE["width"], name
    overflow = page.evaluate(
        "(() => { const w = document.querySelector('.table-wrap');"
        " return w.scrollWidth - w.clientWidth; })()"
    )
    assert overflow <= 0
    _no_horizontal_scroll(page)

    kept_row = page.locator(f"#{dom_id('job-row', kept.job_id)}")
    moving_row = page.locator(f"#{dom_id('job-row', moving.job_id)}")
    kept_row.locator("input[type=checkbox]").check()
    page.evaluate(
        f"document.getElementById('{dom_id('job-row', kept.job_id)}').dataset.mark = 'same'"
    )
    lease = moving_row.locator("[data-lease-text]")
    first = int(re.match(r"(\d+) s left", lease.inner_text()).group(1))
    page.wait_for_timeout(2100)
    assert int(re.match(r"(\d+) s left", lease.inner_text()).group(1)) < first  # it ticks

    transitions.begin_job(moving.job_id, claim_id=moving.claim_id, actor=WORKER)
    expect(moving_row.locator(".state")).to_have_text("EXECUTING", timeout=12_000)
    # The unchanged row is the same DOM node, its tick kept; the page never reloaded.
    assert kept_row.get_attribute("data-mark") == "same"
    assert kept_row.locator("input[type=checkbox]").is_checked()
    screenshot(page, "flow-jobs-live-1280")


def test_jobs_list_polls_only_while_the_tab_is_visible(browser_pages, live_server):
    make_job("noop")
    page = browser_pages("viewer")
    page.goto(live_server.url + "/jobs/")
    page.locator("#job-rows").wait_for()
    polls = _requests(page, "from_row=")
    page.evaluate(
        "Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true})"
    )
    page.wait_for_timeout(6_000)
    assert polls == []
    page.evaluate(
        "Object.defineProperty(document, 'visibilityState',"
        " {value: 'visible', configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    page.wait_for_timeout(1_000)
    assert len(polls) >= 1  # catches up at once


def test_jobs_list_new_jobs_are_announced_not_shifted_in(browser_pages, live_server):
    first = make_job("noop")
    page = browser_pages("viewer")
    page.goto(live_server.url + "/jobs/")
    page.locator(f"#{dom_id('job-row', first.job_id)}").wait_for()
    make_job("noop")
    make_job("noop")
    notice = page.locator("#job-newer")
    expect(notice).to_contain_text("2 new jobs since this page loaded", timeout=12_000)
    notice.get_by_role("link").click()
    expect(page.locator("#job-newer")).to_have_count(0)
    assert page.locator("#job-rows tr").count() == 3


@pytest.mark.parametrize("size", SIZES)
def test_jobs_list_cards_on_a_phone_and_the_nav_fits(browser_pages, live_server, size):
    held = make_job("save", JobState.CLAIMED, lease_seconds=300)
    make_job("delete", JobState.OUTCOME_UNKNOWN)
    page = browser_pages("operator", viewport=size)
    page.goto(live_server.url + "/jobs/")
    page.locator(f"#{dom_id('job-row', held.job_id)}").wait_for()
    _nav_fits(page)
    _no_horizontal_scroll(page)
    if size is NARROW:
        assert page.locator("table.jobs thead").is_hidden()
        display = page.evaluate(
            f"getComputedStyle(document.getElementById('{dom_id('job-row', held.job_id)}')).display"
        )
        assert display == "block"
        assert page.get_by_text(held.job_id, exact=True).is_visible()
    screenshot(page, f"flow-jobs-{_size(size)}")


def test_jobs_list_column_chooser_remembers(browser_pages, live_server):
    job = make_job("noop", mission_id="m-chooser")
    page = browser_pages("viewer")
    page.goto(live_server.url + "/jobs/")
    mission = page.locator(f"#{dom_id('job-row', job.job_id)} .col-mission")
    assert mission.is_hidden()
    page.get_by_text("Columns").click()
    page.locator("[data-column-choice=mission]").check()
    expect(mission).to_be_visible()
    page.reload()
    expect(page.locator(f"#{dom_id('job-row', job.job_id)} .col-mission")).to_be_visible()
    assert page.locator("[data-column-choice=mission]").is_checked()


# --- trouble flags --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_stuck_run_is_flagged_on_runs_and_dashboard_next_to_close(browser_pages, live_server, size):
    run = _stuck_run("archive")
    page = browser_pages("operator", viewport=size)
    page.goto(live_server.url + "/runs/")
    card = page.locator(f"#{dom_id('store', 'archive')}")
    flag = card.locator(".run-stuck")
    expect(flag).to_have_text("stuck")
    assert "owner has no heartbeat" in card.locator(".stuck-reason").inner_text()
    red = page.evaluate("getComputedStyle(document.querySelector('.stuck-reason')).color")
    assert red in ("rgb(180, 35, 24)", "rgb(248, 113, 113)")  # --bad, light or dark
    expect(card.get_by_role("button", name="Close stuck run")).to_be_visible()
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-runs-stuck-{_size(size)}")

    page.goto(live_server.url + "/")
    tile = page.locator("#dashboard-alerts a.tile", has_text="Stuck runs")
    expect(tile.locator(".n")).to_have_text("1")
    runs = page.locator("#dashboard-runs")
    expect(runs.locator(".run-stuck")).to_have_text("stuck")
    _nav_fits(page)
    screenshot(page, f"flow-dashboard-stuck-{_size(size)}")
    runs.locator("input[name=reason]").fill("owner host decommissioned")
    runs.get_by_role("button", name="Close stuck run").click()
    expect(page.locator("#dashboard-runs")).to_contain_text("closed as abandoned")
    run.refresh_from_db()
    assert run.status == "abandoned"


@pytest.mark.parametrize("size", SIZES)
def test_orphaned_job_is_flagged_on_the_list_and_its_page(browser_pages, live_server, size):
    _dead_executor("w-dead")
    job = make_job("save", JobState.CLAIMED, worker_id="w-dead", lease_seconds=600)
    page = browser_pages("viewer", viewport=size)
    page.goto(live_server.url + "/")
    tile = page.locator("#dashboard-alerts a.tile", has_text="Orphaned jobs")
    expect(tile.locator(".n")).to_have_text("1")
    tile.click()
    page.wait_for_url(re.compile(r"lease=orphaned"))
    row = page.locator(f"#{dom_id('job-row', job.job_id)}")
    expect(row.locator(".flag")).to_have_text("orphaned")
    assert "when the lease lapses" in row.locator(".flag").get_attribute("title")
    expect(row.locator(".flag")).to_be_visible()
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-jobs-orphaned-{_size(size)}")
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    expect(page.locator("#job-summary")).to_contain_text("the sweep will offer it again (READY)")


# --- job detail -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_job_page_refreshes_every_panel_then_stops_when_terminal(browser_pages, live_server, size):
    job = make_job("save", JobState.CLAIMED, lease_seconds=300)
    page = browser_pages("operator", viewport=size)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    expect(page.locator("#job-actions")).to_contain_text("Cancel job")
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    transitions.complete_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    expect(page.locator("#job-summary .state")).to_have_text("SUCCEEDED", timeout=10_000)
    # Every panel together: actions, attempts, trail and the watcher itself.
    expect(page.locator("#job-actions")).to_contain_text(
        "No action is available in state SUCCEEDED"
    )
    expect(page.locator("#job-attempts")).to_contain_text("SUCCEEDED")
    assert "(holding)" not in page.locator("#job-attempts").inner_text()
    expect(page.locator("#job-trail")).to_contain_text("STARTED")
    expect(page.locator("#job-watch")).to_contain_text("no longer refreshes")
    polls = _requests(page, f"/jobs/{job.job_id}/")
    page.wait_for_timeout(4_000)
    assert polls == []
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-job-terminal-{_size(size)}")


# --- actions never blank the page -----------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_blank_reason_is_stopped_by_the_browser_on_every_action_form(
    browser_pages, live_server, size
):
    pending = make_job("delete", JobState.CREATED, requested_by="operator")
    ready = make_job("save", JobState.READY)
    page = browser_pages("admin", viewport=size)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)

    page.goto(live_server.url + "/approvals/")
    row = page.locator(f"#{dom_id('approval', pending.job_id)}")
    row.get_by_role("button", name="Approve").click()
    assert row.locator("input[name=reason]:invalid").count() == 1
    page.goto(f"{live_server.url}/jobs/{ready.job_id}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    assert page.locator("#cancel-reason:invalid").count() == 1
    page.wait_for_timeout(500)
    assert posts == []
    expect(page.locator("main h1")).to_contain_text(ready.job_id)
    screenshot(page, f"flow-required-reason-{_size(size)}")


@pytest.mark.parametrize("size", SIZES)
def test_refusal_server_error_and_lost_connection_show_a_message_in_place(
    browser_pages, live_server, size
):
    job = make_job("save", JobState.READY)
    page = browser_pages("operator", viewport=size)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    page.on("dialog", lambda dialog: dialog.accept())
    actions = page.locator("#job-actions")

    # A refusal: the job began meanwhile (the page has not polled yet).
    claim = transitions.claim_job(job.job_id, worker_id=WORKER, lease_seconds=60).claim_id
    transitions.begin_job(job.job_id, claim_id=claim, actor=WORKER)
    actions.locator("input[name=reason]").fill("too late?")
    actions.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job-actions .flash-error")).to_contain_text("EXECUTING")
    assert Job.objects.get(job_id=job.job_id).state == JobState.EXECUTING

    # A server error and a lost connection: the form says so; the page stays.
    other = make_job("save", JobState.READY)
    page.goto(f"{live_server.url}/jobs/{other.job_id}/")
    page.route(
        "**/job-cancel/**", lambda route: route.fulfill(status=500, body="<h1>Server Error</h1>")
    )
    form = page.locator("#job-actions form")
    form.locator("input[name=reason]").fill("try it")
    form.get_by_role("button", name="Cancel job").click()
    expect(form.locator("[data-client-error]")).to_contain_text("The server failed (500)")
    expect(page.locator("main h1")).to_contain_text(other.job_id)
    screenshot(page, f"flow-server-error-{_size(size)}")
    page.unroute("**/job-cancel/**")
    page.route("**/job-cancel/**", lambda route: route.abort())
    form.get_by_role("button", name="Cancel job").click()
    expect(form.locator("[data-client-error]")).to_contain_text("did not answer")
    assert Job.objects.get(job_id=other.job_id).state == JobState.READY


# --- approvals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_approvals_whole_queue_and_bulk_with_four_eyes_preview(browser_pages, live_server, size):
    others = [make_job("delete", JobState.CREATED, requested_by="operator") for _ in range(52)]
    own = make_job("delete", JobState.CREATED, requested_by="approver")
    page = browser_pages("approver", viewport=size)
    page.goto(live_server.url + "/approvals/")
    expect(page.locator("#approvals-queue")).to_contain_text("Showing 1–50 of 53")
    page.get_by_role("link", name="Next →").click()
    expect(page.locator("#approvals-queue")).to_contain_text("Showing 51–53 of 53")
    for job in (others[-1], own):
        page.locator(f"#{dom_id('approval', job.job_id)} input[name=job_ids]").check()
    page.get_by_text("Decide many").click()
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("#approvals-bulk-preview")
    expect(preview).to_contain_text("you requested it: someone else must decide (four eyes)")
    expect(preview).to_contain_text("1 ticked row(s) you may decide")
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-approvals-bulk-{_size(size)}")
    page.locator("#approvals-bulk-reason").fill("copies checked")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Approve ticked").click()
    expect(page.locator("#approvals-bulk-result")).to_contain_text(
        "Approved 1 delete(s); 1 not decided."
    )
    assert Job.objects.get(job_id=others[-1].job_id).state == JobState.READY
    assert Job.objects.get(job_id=own.job_id).state == JobState.CREATED


# --- cancel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_cancel_from_the_job_page_and_in_bulk(browser_pages, live_server, size):
    one = make_job("save", JobState.READY)
    many = [make_job("save", JobState.READY, mission_id="m-cancel") for _ in range(2)]
    page = browser_pages("operator", viewport=size)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{live_server.url}/jobs/{one.job_id}/")
    page.locator("#cancel-reason").fill("withdrawn by the producer")
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job-actions")).to_contain_text("Cancelled: the job is REJECTED")
    expect(page.locator("#job-summary .state")).to_have_text("REJECTED")
    screenshot(page, f"flow-cancelled-{_size(size)}")

    page.goto(live_server.url + "/jobs/?mission=m-cancel")
    for job in many:
        page.locator(f"#{dom_id('job-row', job.job_id)} input[name=job_ids]").check()
    page.get_by_text("Bulk actions").click()
    page.get_by_role("button", name="Preview eligible rows").click()
    expect(page.locator("#pv-cancel + p + p")).to_contain_text("2")
    page.locator("#bulk-reason").fill("mission withdrawn")
    page.get_by_role("button", name="Cancel not begun").click()
    expect(page.locator("#bulk-result")).to_contain_text("Cancelled 2 job(s)")
    screenshot(page, f"flow-bulk-cancel-{_size(size)}")
    assert {Job.objects.get(job_id=j.job_id).result_code for j in many} == {"CANCELLED"}


# --- audit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_audit_columns_named_and_detail_expands_wrapped(browser_pages, live_server, size):
    job = make_job("save", JobState.FAILED)
    transitions.retry_job(job.job_id, actor="operator", reason="x" * 300)
    page = browser_pages("viewer", viewport=size)
    page.goto(f"{live_server.url}/audit/?job={job.job_id}")
    if size is WIDE:
        headers = page.locator("table.audit thead th").all_inner_texts()
        assert [h.strip().lower() for h in headers] == [
            "event #",
            "when",
            "event",
            "actor",
            "subject",
            "result",
            "detail",
        ]
    else:
        assert page.locator("table.audit thead").is_hidden()
    row = page.locator("#audit-rows tr").first
    pre = row.locator("pre.json")
    assert pre.is_hidden()  # collapsed by default
    row.locator("details summary").click()
    expect(pre).to_be_visible()
    assert pre.evaluate("el => el.scrollWidth <= el.clientWidth + 1")  # wrapped, not clipped
    _no_horizontal_scroll(page)
    _nav_fits(page)
    screenshot(page, f"flow-audit-{_size(size)}")


# --- search, charts, times ------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_search_by_prefix_in_the_browser(browser_pages, live_server, size):
    hit = make_job("noop", mission_id="quarterly-close-2026")
    miss = make_job("noop", mission_id="weekly")
    page = browser_pages("viewer", viewport=size)
    page.goto(live_server.url + "/jobs/")
    page.locator("#id_q").press_sequentially("quarterly-cl")
    page.wait_for_url(re.compile(r"q=quarterly-cl"))
    expect(page.locator(f"#{dom_id('job-row', hit.job_id)}")).to_be_visible()
    expect(page.locator(f"#{dom_id('job-row', miss.job_id)}")).to_have_count(0)
    screenshot(page, f"flow-search-prefix-{_size(size)}")


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_charts_have_axes_scopes_and_ready_age(browser_pages, live_server, size):
    at = transitions.db_now() - dt.timedelta(minutes=3)
    for _ in range(3):
        make_job("save", JobState.SUCCEEDED, at=at)
    make_job("noop", JobState.FAILED, at=at)
    make_job("save", at=transitions.db_now() - dt.timedelta(minutes=7))
    page = browser_pages("viewer", viewport=size)
    page.goto(live_server.url + "/")
    chart = page.locator("#dashboard-throughput svg.chart")
    expect(chart.locator("text.axis-title").first).to_have_text("jobs / min")
    assert chart.locator("polyline.series").count() == 2
    expect(page.locator("#dashboard-throughput .legend")).to_contain_text("scope save")
    expect(page.locator("#dashboard-ready")).to_contain_text("oldest waits 7 min")
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-dashboard-charts-{_size(size)}")


@pytest.mark.parametrize("size", SIZES)
def test_times_show_zone_and_age_that_ticks(browser_pages, live_server, size):
    job = make_job("save", JobState.FAILED)
    page = browser_pages("viewer", viewport=size)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    created = page.locator("#job-summary dt:has-text('Created') + dd")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", created.inner_text())
    age = created.locator("[data-age]")
    first = age.inner_text()
    assert first.endswith("s ago")
    page.wait_for_timeout(2100)
    assert age.inner_text() != first
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-times-{_size(size)}")


# --- what a consolidation delete keeps, styled error pages ----------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_approvals_row_shows_the_copy_a_consolidation_delete_keeps(
    browser_pages, live_server, settings, size
):
    from runs.consolidators import seed_duplicate_vault
    from runs.worker import ConsolidatorWorker

    seed_duplicate_vault(settings.VAULT_ROOT, originals=1, copies=1)
    ConsolidatorWorker(store="vault", worker_id="c-keep", once=True, say=lambda _t: None).run()
    delete = Job.objects.get(job_type="DELETE_OBJECT")
    page = browser_pages("approver", viewport=size)
    page.goto(live_server.url + "/approvals/")
    row = page.locator(f"#{dom_id('approval', delete.job_id)}")
    expect(row.locator(".keeps")).to_contain_text("keeps notes/dup-1.md")
    expect(row.locator(".keeps")).to_contain_text("present, same hash")
    expect(row.locator(".keeps")).to_be_visible()
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-approvals-keeps-{_size(size)}")


@pytest.mark.parametrize("size", SIZES)
def test_unknown_job_and_forbidden_action_show_styled_error_pages(browser_pages, live_server, size):
    page = browser_pages("viewer", viewport=size)
    response = page.goto(live_server.url + "/jobs/no-such-job-42/")
    assert response.status == 404
    panel = page.locator(".error-panel")
    expect(panel).to_contain_text("HTTP 404")
    expect(panel).to_contain_text("Not found")
    expect(panel.get_by_role("link", name="Search the jobs")).to_be_visible()
    expect(page.locator("nav.nav")).to_be_visible()  # the console's own layout, not Django's
    _nav_fits(page)
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-error-404-{_size(size)}")
    # A signed-in account without the view permission: the styled 403, same layout.
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("nobody", password="x-unused-9")
    page = browser_pages("nobody", viewport=size)
    response = page.goto(live_server.url + "/jobs/")
    assert response.status == 403
    # The console's layout with the refusal in place, naming the permission that is missing.
    expect(page.locator(".forbidden")).to_contain_text("Not allowed.")
    expect(page.locator(".forbidden code")).to_have_text("inbox.view_job")
    expect(page.locator("nav.nav")).to_be_visible()
    _no_horizontal_scroll(page)
    screenshot(page, f"flow-error-403-{_size(size)}")
