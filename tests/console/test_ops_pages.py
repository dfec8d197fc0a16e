"""The operator pages through Django's test client: reads, actions, refusals, regions, queries."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from console.htmx import dom_id
from inbox import vault
from inbox.errors import LostClaim
from inbox.models import Job, JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

PAGES = ["/reconcile/", "/approvals/", "/runs/", "/workers/"]


@pytest.fixture(autouse=True)
def _vault(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"


@pytest.fixture
def as_user(role_users):
    def login(name: str, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(role_users[name])
        return client

    return login


def rid() -> str:
    return uuid.uuid4().hex


def unknown_delete(*, present: bool = False, changed: bool = False) -> Job:
    job = make_job("delete", JobState.OUTCOME_UNKNOWN)
    if present:
        uid = job.job_id.removeprefix("delete-")
        content = f"# Note {uid}\n" + ("edited\n" if changed else "")
        vault.save(
            job.vault_path, content=content, provenance_hash=vault.sha256_bytes(content.encode())
        )
    return job


def stuck_run(store: str = "archive"):
    """An active run with one pending group whose owner is gone (a one-hour lease)."""
    from runs.consolidators import PlannedGroup, PlannedMember
    from runs.transitions import plan_run

    class OneGroup:
        name = "one-group"

        def plan(self, *, store, carry_over):
            return [PlannedGroup("k", (PlannedMember("a.md"), PlannedMember("b.md")))]

    return plan_run(store=store, owner="gone-worker", lease_seconds=3600, consolidator=OneGroup())


def htmx(target: str) -> dict[str, str]:
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", PAGES)
def test_get_page_as_anonymous_redirects_to_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


# Queries per page: 4 for the session, user and permissions, the rest the page's own.
BUDGETS = {"/reconcile/": 9, "/approvals/": 6, "/runs/": 8, "/workers/": 8}


def _seed_rows(n: int, start: int = 0) -> None:
    from inbox.workers import register_worker

    for i in range(start, start + n):
        unknown_delete(present=bool(i % 2))
        make_job("delete", JobState.CREATED, requested_by="operator")
        stuck_run(f"store-{i}")
        register_worker(worker_id=f"w-{i}", kind="executor", scope="save")


@pytest.mark.parametrize("url", PAGES)
def test_get_page_as_viewer_costs_the_same_queries_for_one_row_or_many(as_user, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = as_user("viewer")
    _seed_rows(1)
    with CaptureQueriesContext(connection) as one:
        assert client.get(url).status_code == 200
    _seed_rows(5, start=1)
    with CaptureQueriesContext(connection) as many:
        response = client.get(url)
    assert response.status_code == 200
    assert len(many) == len(one) <= BUDGETS[url]


def test_get_workers_as_htmx_poller_renders_only_its_region(as_user):
    response = as_user("viewer").get("/workers/", **htmx("workers-table"))
    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<section id="workers-table"')


def test_get_reconcile_as_viewer_shows_evidence_but_no_decision_buttons(as_user):
    job = unknown_delete(present=True)
    body = as_user("viewer").get("/reconcile/").content.decode()
    assert job.job_id in body
    assert "present with the expected hash" in body
    assert "Confirm deleted</button>" not in body


# --- reconcile actions ----------------------------------------------------------------------------


def test_post_confirm_deleted_as_operator_reconciles_and_records_user_and_reason(as_user):
    job = unknown_delete(present=False)
    response = as_user("operator").post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "probe shows it gone"},
        **htmx(dom_id("case", job.job_id)),
    )
    assert response.status_code == 200
    assert response.content.lstrip().startswith(
        f'<article id="{dom_id("case", job.job_id)}"'.encode()
    )
    job.refresh_from_db()
    assert (job.state, job.result_code) == (JobState.RECONCILED, "CONFIRMED_DELETED")
    event = AuditEvent.objects.get(job_id=job.job_id, event_type=EventType.RECONCILED)
    assert (event.actor, event.detail["reason"]) == ("operator", "probe shows it gone")


def test_post_confirm_deleted_with_object_present_is_refused_and_changes_nothing(as_user):
    job = unknown_delete(present=True)
    response = as_user("operator").post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "sure?"},
    )
    assert response.status_code == 409
    assert b"still in the vault" in response.content
    job.refresh_from_db()
    assert job.state == JobState.OUTCOME_UNKNOWN


def test_post_not_applied_with_fresh_delete_twice_same_request_makes_one_new_job(as_user):
    job = unknown_delete(present=True)
    client = as_user("operator")
    data = {"request_id": rid(), "reason": "untouched", "fresh_delete": "1"}
    first = client.post(reverse("console:reconcile_not_applied", args=[job.job_id]), data)
    second = client.post(reverse("console:reconcile_not_applied", args=[job.job_id]), data)
    assert (first.status_code, second.status_code) == (200, 200)
    assert b"Already done" in second.content
    fresh = Job.objects.filter(supersedes=job.job_id)
    assert fresh.count() == 1
    assert fresh.get().state == JobState.CREATED


def test_post_annotate_twice_with_same_request_id_annotates_once(as_user):
    job = unknown_delete(present=True, changed=True)
    client = as_user("operator")
    data = {"request_id": rid(), "reason": "someone edited it; ask the owner"}
    client.post(reverse("console:reconcile_annotate", args=[job.job_id]), data)
    client.post(reverse("console:reconcile_annotate", args=[job.job_id]), data)
    events = AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.DIAGNOSED)
    assert events.count() == 1
    assert events.get().actor == "operator"
    job.refresh_from_db()
    assert (job.state, job.result_code) == (JobState.OUTCOME_UNKNOWN, "RECONCILE_CONFLICT")


def test_post_confirm_deleted_without_reason_is_400_and_changes_nothing(as_user):
    job = unknown_delete(present=False)
    response = as_user("operator").post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "  "},
    )
    assert response.status_code == 400
    assert b"Give a reason" in response.content
    job.refresh_from_db()
    assert job.state == JobState.OUTCOME_UNKNOWN


@pytest.mark.parametrize("user", ["viewer", "approver"])
def test_post_confirm_deleted_without_permission_is_403_in_region(as_user, user):
    job = unknown_delete(present=False)
    response = as_user(user).post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "x"},
        **htmx(dom_id("case", job.job_id)),
    )
    assert response.status_code == 403
    assert b"inbox.reconcile_job" in response.content
    assert b"<html" not in response.content
    job.refresh_from_db()
    assert job.state == JobState.OUTCOME_UNKNOWN


def test_get_on_action_url_is_405(as_user):
    job = unknown_delete()
    assert (
        as_user("operator")
        .get(reverse("console:reconcile_confirm_deleted", args=[job.job_id]))
        .status_code
        == 405
    )


def test_post_action_without_csrf_token_is_403(as_user):
    job = unknown_delete(present=False)
    client = as_user("operator", enforce_csrf_checks=True)
    response = client.post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "x"},
    )
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.OUTCOME_UNKNOWN


def test_post_reconcile_auto_confirms_absent_annotates_present_with_operator_reason(as_user):
    gone = unknown_delete(present=False)
    kept = unknown_delete(present=True)
    response = as_user("operator").post(
        "/reconcile/auto", {"request_id": rid(), "reason": "nightly cleanup"}
    )
    assert response.status_code == 200
    assert b"Reconciled 1 as CONFIRMED_DELETED, annotated 1" in response.content
    gone.refresh_from_db()
    kept.refresh_from_db()
    assert gone.state == JobState.RECONCILED
    assert (kept.state, kept.result_code) == (JobState.OUTCOME_UNKNOWN, "RECONCILE_NOT_APPLIED")
    reasons = set(
        AuditEvent.objects.filter(
            job_id__in=[gone.job_id, kept.job_id], actor="operator"
        ).values_list("detail__reason", flat=True)
    )
    assert reasons == {"nightly cleanup"}


def test_get_reconcile_preview_names_what_auto_will_do(as_user):
    gone = unknown_delete(present=False)
    body = as_user("operator").get("/reconcile/").content.decode()
    preview = body.split('id="auto-title"')[1].split("</section>")[0]
    assert gone.job_id in preview
    assert "CONFIRMED_DELETED" in preview


# --- approvals ------------------------------------------------------------------------------------


def test_post_approve_as_approver_makes_job_ready_and_records_reason(as_user):
    job = make_job("delete", JobState.CREATED, requested_by="operator")
    response = as_user("approver").post(
        reverse("console:approve_delete", args=[job.job_id]),
        {"request_id": rid(), "reason": "duplicate copy"},
    )
    assert response.status_code == 200
    assert "approvals-changed" in response["HX-Trigger"]
    job.refresh_from_db()
    assert job.state == JobState.READY
    event = AuditEvent.objects.get(job_id=job.job_id, event_type=EventType.APPROVED)
    assert (event.actor, event.detail["reason"]) == ("approver", "duplicate copy")


def test_post_deny_as_approver_rejects_the_job(as_user):
    job = make_job("delete", JobState.CREATED, requested_by="operator")
    as_user("approver").post(
        reverse("console:deny_delete", args=[job.job_id]),
        {"request_id": rid(), "reason": "still needed"},
    )
    job.refresh_from_db()
    assert (job.state, job.result_code) == (JobState.REJECTED, "DENIED")


def test_post_approve_as_requester_is_refused_and_job_stays_created(as_user):
    job = make_job("delete", JobState.CREATED, requested_by="approver")
    response = as_user("approver").post(
        reverse("console:approve_delete", args=[job.job_id]),
        {"request_id": rid(), "reason": "mine"},
    )
    assert response.status_code == 409
    assert b"four eyes" in response.content
    job.refresh_from_db()
    assert job.state == JobState.CREATED


def test_get_approvals_as_requester_shows_no_buttons_for_own_request(as_user):
    own = make_job("delete", JobState.CREATED, requested_by="approver")
    other = make_job("delete", JobState.CREATED, requested_by="operator")
    body = as_user("approver").get("/approvals/").content.decode()
    own_row = body.split(f'id="{dom_id("approval", own.job_id)}"')[1].split("</tr>")[0]
    other_row = body.split(f'id="{dom_id("approval", other.job_id)}"')[1].split("</tr>")[0]
    assert "Approve</button>" not in own_row
    assert "someone else must decide" in own_row
    assert "Approve</button>" in other_row


def test_post_approve_as_operator_is_403(as_user):
    job = make_job("delete", JobState.CREATED, requested_by="viewer")
    response = as_user("operator").post(
        reverse("console:approve_delete", args=[job.job_id]), {"request_id": rid(), "reason": "x"}
    )
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.CREATED


# --- runs -----------------------------------------------------------------------------------------


def test_post_close_run_as_operator_abandons_it_with_reason(as_user):
    from runs.models import RunStatus

    run = stuck_run()
    response = as_user("operator").post(
        reverse("console:close_run", args=[run.run_id]),
        {"request_id": rid(), "reason": "owner host is gone"},
    )
    assert response.status_code == 200
    run.refresh_from_db()
    assert (run.status, run.closed_by, run.close_reason) == (
        RunStatus.ABANDONED,
        "operator",
        "owner host is gone",
    )
    event = AuditEvent.objects.get(run_id=run.run_id, event_type=EventType.RUN_ABANDONED)
    assert event.actor == "operator"


def test_post_close_run_already_closed_is_409_and_writes_nothing(as_user):
    run = stuck_run()
    client = as_user("operator")
    client.post(
        reverse("console:close_run", args=[run.run_id]), {"request_id": rid(), "reason": "first"}
    )
    before = AuditEvent.objects.filter(run_id=run.run_id).count()
    response = client.post(
        reverse("console:close_run", args=[run.run_id]), {"request_id": rid(), "reason": "again"}
    )
    assert response.status_code == 409
    assert AuditEvent.objects.filter(run_id=run.run_id).count() == before


def test_get_runs_poller_renders_only_the_store_live_region(as_user):
    stuck_run("archive")
    response = as_user("viewer").get("/runs/?store=archive", **htmx(dom_id("live", "archive")))
    assert response.content.lstrip().startswith(f'<div id="{dom_id("live", "archive")}"'.encode())
    assert b"pending" in response.content


# --- scopes ---------------------------------------------------------------------------------------


def test_post_pause_then_resume_scope_as_operator_records_both(as_user):
    from inbox.scopes import is_paused

    client = as_user("operator")
    paused = client.post("/workers/scopes/save/pause", {"request_id": rid(), "reason": "disk"})
    assert paused.status_code == 200
    assert is_paused("save")
    resumed = client.post("/workers/scopes/save/resume", {"request_id": rid(), "reason": ""})
    assert resumed.status_code == 200
    assert not is_paused("save")
    actions = list(
        AuditEvent.objects.filter(event_type=EventType.OPERATOR_ACTION, actor="operator")
        .order_by("event_id")
        .values_list("detail__action", "detail__reason")
    )
    assert actions == [("pause_scope", "disk"), ("resume_scope", "")]


def test_post_pause_unknown_scope_is_refused(as_user):
    response = as_user("operator").post(
        "/workers/scopes/nope/pause", {"request_id": rid(), "reason": "x"}
    )
    assert response.status_code in (404, 409)


def test_post_pause_scope_as_viewer_is_403_and_scope_keeps_running(as_user):
    from inbox.scopes import is_paused

    response = as_user("viewer").post(
        "/workers/scopes/save/pause", {"request_id": rid(), "reason": "x"}
    )
    assert response.status_code == 403
    assert not is_paused("save")


def test_get_runs_with_store_shows_only_that_store(as_user):
    stuck_run("archive")
    stuck_run("other")
    body = as_user("viewer").get("/runs/?store=archive").content.decode()
    assert dom_id("store", "archive") in body
    assert dom_id("store", "other") not in body


def test_get_workers_tells_dead_from_cleanly_stopped(as_user):
    import time

    from inbox.workers import mark_stopped, register_worker

    register_worker(worker_id="w-here", kind="executor", scope="save")
    register_worker(worker_id="w-bye", kind="executor", scope="save")
    mark_stopped(worker_id="w-bye")
    # Dead after 3 × poll + lease = 0 s: silent from the next instant on.
    register_worker(
        worker_id="w-gone", kind="executor", scope="save", poll_seconds=0, lease_seconds=0
    )
    time.sleep(0.01)
    body = as_user("viewer").get("/workers/").content.decode()

    def row(worker_id: str) -> str:
        return body.split(f">{worker_id}</td>")[1].split("</tr>")[0]

    assert "alive" in row("w-here")
    assert "stopped" in row("w-bye") and "dead" not in row("w-bye")
    assert "dead" in row("w-gone")
    assert "1 alive" in body and "1 dead" in body and "1 stopped" in body


def test_post_case_action_asks_the_bulk_preview_to_reload(as_user):
    job = unknown_delete(present=False)
    client = as_user("operator")
    response = client.post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        {"request_id": rid(), "reason": "gone"},
    )
    assert "reconcile-changed" in response["HX-Trigger"]
    preview = client.get("/reconcile/", **htmx("reconcile-auto"))
    assert preview.content.lstrip().startswith(b'<section id="reconcile-auto"')
    assert job.job_id not in preview.content.decode()
    count = client.get("/reconcile/", **htmx("queue-count"))
    assert count.content.strip().startswith(b'<span id="queue-count"')
    assert b">0</span>" in count.content


def test_get_pending_count_region_renders_only_the_count(as_user):
    make_job("delete", JobState.CREATED, requested_by="operator")
    response = as_user("viewer").get("/approvals/", **htmx("pending-count"))
    assert response.content.strip().startswith(b'<span id="pending-count"')
    assert b">1</span>" in response.content


def test_get_reconcile_shows_the_former_holders_late_report_as_evidence(as_user):
    import datetime as dt

    from inbox import transitions

    t0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    job = make_job("delete", JobState.READY)
    claim = transitions.claim_job(job.job_id, worker_id="w-late", lease_seconds=30, at=t0)
    transitions.begin_job(job.job_id, claim_id=claim.claim_id, actor="w-late", at=t0)
    transitions.recover_stale_claims(at=t0 + dt.timedelta(seconds=31))
    with pytest.raises(LostClaim):
        transitions.complete_job(
            job.job_id,
            claim_id=claim.claim_id,
            actor="w-late",
            result_code="DELETED",
            at=dt.datetime(2030, 1, 1, 12, 3, 4, tzinfo=dt.UTC),
        )
    body = as_user("viewer").get("/reconcile/").content.decode()
    assert "The former holder reported: deleted at" in body
    assert "12:03:04</time>, after its lease lapsed" in body
    assert "w-late" in body and "the vault probe decides" in body
