"""The jobs list and the job detail page: filters, search, sort, capped counts, bounded
queries, lease countdown, attempts, trail and payload redaction."""

from __future__ import annotations

import datetime as dt
import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import EventType
from core import paging
from inbox import transitions
from inbox.errors import LostClaim
from inbox.models import Job, JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def _list(client: Client, **params) -> str:
    response = client.get(reverse("console:job_list"), params, headers=hx("job-table"))
    assert response.status_code == 200
    return response.content.decode()


def test_job_list_filters_by_state_type_scope_worker_and_mission(client, viewer) -> None:
    failed = make_job("save", state=JobState.FAILED, mission_id="m-x", worker_id="w-1")
    noop = make_job("noop", state=JobState.READY, mission_id="m-y")
    assert failed.job_id in _list(client, state="FAILED")
    assert noop.job_id not in _list(client, state="FAILED")
    assert noop.job_id in _list(client, job_type="NOOP")
    assert failed.job_id not in _list(client, job_type="NOOP")
    assert noop.job_id in _list(client, scope="noop")
    assert failed.job_id in _list(client, worker="w-1")
    assert noop.job_id not in _list(client, worker="w-1")
    assert failed.job_id in _list(client, mission="m-x")
    assert noop.job_id not in _list(client, mission="m-x")


def test_job_list_search_matches_each_identifier_by_prefix(client, viewer) -> None:
    job = make_job("save", mission_id="m-search")
    other = make_job("save", mission_id="m-other")
    for term in (job.job_id, job.object_id, job.idempotency_key, "m-search"):
        html = _list(client, q=term)
        assert job.job_id in html, term
        assert other.job_id not in html, term
        # A prefix of any of the four finds the job (an index range).
        assert job.job_id in _list(client, q=term[:-2]), term
    # Prefix, not substring: the middle of an id finds nothing (that would scan the table).
    assert job.job_id not in _list(client, q=job.job_id[3:])
    # Case matters, as in the ids themselves.
    assert job.job_id not in _list(client, q=job.job_id.upper())


def test_job_list_filters_by_created_range(client, viewer) -> None:
    base = transitions.db_now()
    old = make_job("save", at=base - dt.timedelta(days=3))
    new = make_job("save", at=base)
    since = (base - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    html = _list(client, created_after=since)
    assert new.job_id in html and old.job_id not in html
    html = _list(client, created_before=since)
    assert old.job_id in html and new.job_id not in html


def test_job_list_sorts_by_created_both_ways(client, viewer) -> None:
    base = transitions.db_now()
    first = make_job("save", at=base - dt.timedelta(minutes=5))
    second = make_job("save", at=base)
    newest_first = _list(client, sort="-created_at")
    assert newest_first.index(second.job_id) < newest_first.index(first.job_id)
    oldest_first = _list(client, sort="created_at")
    assert oldest_first.index(first.job_id) < oldest_first.index(second.job_id)


def test_job_list_shows_what_lease_expiry_does(client, viewer) -> None:
    save = make_job("save", state=JobState.CLAIMED)
    delete = make_job("delete", state=JobState.CLAIMED)
    html = _list(client, q=save.job_id)
    assert "retried" in html and "parked for reconcile" not in html
    html = _list(client, q=delete.job_id)
    assert "parked for reconcile" in html


def test_job_list_count_is_capped(client, viewer, monkeypatch) -> None:
    monkeypatch.setattr(paging, "COUNT_CAP", 3)
    for _ in range(5):
        make_job("noop")
    make_job("save")
    assert "of 3+</span>" in _list(client)
    assert "of 1</span>" in _list(client, job_type="SAVE_OBJECT")
    assert "of 0</span>" in _list(client, job_type="DELETE_OBJECT")


def test_job_list_url_round_trips_filters_for_bookmarks(client, viewer) -> None:
    job = make_job("save", state=JobState.FAILED, mission_id="m-book")
    page = client.get(reverse("console:job_list"), {"state": "FAILED", "mission": "m-book"})
    html = page.content.decode()
    assert job.job_id in html
    assert '<option value="FAILED" selected>' in html
    assert 'value="m-book"' in html


def test_job_list_pages_without_count_and_bounded_queries(
    client, viewer, django_assert_max_num_queries
) -> None:
    for _ in range(55):
        make_job("noop")
    with django_assert_max_num_queries(8):
        first = client.get(reverse("console:job_list"))
    html = first.content.decode()
    assert "Next →" in html
    # Keyset paging: the next page is the rows after the last one shown, named by a
    # cursor in the link, never an OFFSET.
    next_url = re.search(r'rel="next" href="([^"]+)"', html)
    assert next_url and "after_row=" in next_url.group(1)
    with django_assert_max_num_queries(8):
        second = client.get(reverse("console:job_list") + unescape(next_url.group(1)))
    html = second.content.decode()
    assert "5 shown" in html
    assert "Next →" not in html
    assert "← Previous" in html


def test_job_list_never_reads_payloads(client, viewer) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_job("save", content="x" * 50_000)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(reverse("console:job_list")).status_code == 200
    job_reads = [q["sql"] for q in captured.captured_queries if 'FROM "inbox_job"' in q["sql"]]
    assert job_reads
    assert not [sql for sql in job_reads if '"payload"' in sql]


def test_job_detail_shows_identity_fingerprint_attempts_and_trail(client, viewer) -> None:
    job = make_job("save", state=JobState.FAILED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert job.idempotency_key in html
    assert "sealed, intact" in html
    assert job.vault_path in html
    for event_type in ("REQUESTED", "READY", "CLAIMED", "STARTED", "FAILED"):
        assert f"<strong>{event_type}</strong>" in html
    assert html.index("<strong>REQUESTED</strong>") < html.index("<strong>FAILED</strong>")
    assert "Attempts" in html and "worker-test" in html


def test_job_detail_trail_includes_rejected_late_write(client, viewer) -> None:
    now = transitions.db_now()
    job = make_job("save", state=JobState.EXECUTING, at=now - dt.timedelta(seconds=300))
    old_claim = job.claim_id
    transitions.recover_stale_claims(at=now)
    transitions.claim_job(job.job_id, worker_id="w-new", lease_seconds=60)
    with pytest.raises(LostClaim):
        transitions.complete_job(job.job_id, claim_id=old_claim, actor="worker-test")
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert f"<strong>{EventType.STALE_WRITE_REJECTED}</strong>" in html
    assert f"<strong>{EventType.LEASE_EXPIRED}</strong>" in html


def test_job_detail_redacts_content_without_view_payload(client) -> None:
    job = make_job("save", content="top secret words\n")
    login(client, "look", "viewer")
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert "top secret words" not in html
    assert "redacted" in html
    client.logout()
    login(client, "ops", "operator")
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert "top secret words" in html


def test_job_detail_missing_job_is_404(client, viewer) -> None:
    assert client.get(reverse("console:job_detail", args=["no-such-job"])).status_code == 404


def test_job_detail_bounded_queries(client, viewer, django_assert_max_num_queries) -> None:
    job = make_job("save", state=JobState.FAILED)
    with django_assert_max_num_queries(10):
        assert client.get(reverse("console:job_detail", args=[job.job_id])).status_code == 200


def test_lease_countdown_counts_down_from_database_time(client, viewer) -> None:
    job = make_job("save", state=JobState.CLAIMED, lease_seconds=600)
    html = client.get(reverse("console:job_lease", args=[job.job_id])).content.decode()
    remaining = int(html.split('data-lease-remaining="')[1].split('"')[0])
    assert 590 <= remaining <= 600
    assert " s left" in html
    assert 'hx-trigger="every 10s"' in html


def test_lease_countdown_after_expiry_says_awaiting_sweep(client, viewer) -> None:
    now = transitions.db_now()
    job = make_job("save", state=JobState.CLAIMED, at=now - dt.timedelta(seconds=100))
    html = client.get(reverse("console:job_lease", args=[job.job_id])).content.decode()
    assert "expired 4" in html  # 100 s ago minus the 60 s lease: about 40 s
    assert "awaiting sweep" in html
    assert 'class="lease-countdown expired"' in html


def test_lease_countdown_for_unheld_job_is_static(client, viewer) -> None:
    job = make_job("save", state=JobState.SUCCEEDED)
    html = client.get(reverse("console:job_lease", args=[job.job_id])).content.decode()
    assert "not held" in html
    assert "data-lease-remaining" not in html


def test_job_detail_unknown_outcome_links_to_reconcile(client, viewer) -> None:
    job = make_job("delete", state=JobState.OUTCOME_UNKNOWN)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert "/reconcile/?job=" in html
    assert Job.objects.get(job_id=job.job_id).state == JobState.OUTCOME_UNKNOWN


def test_job_list_lapsed_filter_shows_only_lapsed_leases(client, viewer) -> None:
    now = transitions.db_now()
    lapsed = make_job("save", state=JobState.CLAIMED, at=now - dt.timedelta(seconds=300))
    fresh = make_job("save", state=JobState.CLAIMED, lease_seconds=600)
    html = _list(client, lease="lapsed")
    assert lapsed.job_id in html
    assert fresh.job_id not in html
    assert fresh.job_id in _list(client, lease="held")


def test_job_list_shows_lease_countdown_for_held_rows(client, viewer) -> None:
    now = transitions.db_now()
    lapsed = make_job("save", state=JobState.CLAIMED, at=now - dt.timedelta(seconds=300))
    done = make_job("save", state=JobState.SUCCEEDED)
    html = _list(client, q=lapsed.job_id)
    assert f'id="lease-row-{lapsed.job_id}"' in html
    assert "awaiting sweep" in html
    assert "lease-row-" not in _list(client, q=done.job_id)
