"""Task jobs in the browser: a non-idempotent task decided on the reconcile page (the htmx
button carries its outcome), and a retried task's job page with its next attempt. Pages are
photographed at 1280 and 390 px under ``artifacts/screenshots/``."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from audit.models import AuditEvent, EventType
from console.htmx import dom_id
from inbox import transitions
from inbox.models import Job, JobState
from tests.console.conftest import NARROW, WIDE, screenshot
from tests.tasks import sample
from tests.tasks.support import WORKER, unknown_task

pytestmark = [pytest.mark.browser]


def test_reconcile_task_case_decided_applied_with_reason(browser_pages, live_server):
    job = unknown_task("o-browser")
    case_id = f"#{dom_id('case', job.job_id)}"
    for size, suffix in ((NARROW, "390"), (WIDE, "1280")):
        page = browser_pages("operator", viewport=size)
        page.goto(live_server.url + "/reconcile/")
        page.locator(case_id).get_by_text("No vault probe").wait_for()
        screenshot(page, f"reconcile-task-{suffix}")
    case = page.locator(case_id)
    case.locator("input[name=reason]").fill("the bank ledger shows the charge")
    case.get_by_role("button", name="It ran (applied)").click()
    page.locator(case_id).get_by_text("Decided: the job is RECONCILED (APPLIED)").wait_for()
    expect(page.locator("#queue-count")).to_have_text("0")
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.state, stored.result_code) == (JobState.RECONCILED, "APPLIED")
    event = AuditEvent.objects.get(job_id=job.job_id, event_type=EventType.RECONCILED)
    assert (event.actor, event.detail["reason"]) == ("operator", "the bank ledger shows the charge")
    screenshot(page, "reconcile-task-decided-1280")


def test_job_page_of_a_retried_task_shows_the_next_attempt(browser_pages, live_server):
    result = sample.flaky.enqueue("browser", 5)
    job = transitions.claim_job(result.id, worker_id=WORKER, lease_seconds=30)
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    transitions.schedule_retry(
        job.job_id,
        claim_id=job.claim_id,
        actor=WORKER,
        retry_in=600,
        result_code="TASK_ERROR",
        error="builtins.RuntimeError: flaky browser run 1",
        executed_detail={"handler": "inbox.handlers.run_task"},
    )
    for size, suffix in ((WIDE, "1280"), (NARROW, "390")):
        page = browser_pages("viewer", viewport=size)
        page.goto(f"{live_server.url}/jobs/{job.job_id}/")
        expect(page.locator("#job-summary")).to_contain_text("Next attempt")
        expect(page.locator("#job-summary")).to_contain_text("not before")
        expect(page.locator("#job-trail")).to_contain_text("RETRY_SCHEDULED")
        screenshot(page, f"job-task-retry-{suffix}")
