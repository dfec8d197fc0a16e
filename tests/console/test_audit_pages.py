"""The audit log page: filters, subject links, capped count, bounded queries, CSV export."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.test import Client
from django.urls import reverse

from audit.events import record_event
from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.models import JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def _page(client: Client, **params) -> str:
    response = client.get(reverse("console:event_list"), params, headers=hx("audit-table"))
    assert response.status_code == 200
    return response.content.decode()


def test_audit_filters_by_type_actor_job_and_run(client, viewer) -> None:
    a = make_job("save", state=JobState.FAILED)
    b = make_job("noop")
    record_event(event_type=EventType.RUN_PLANNED, actor="planner-1", run_id="run-77")
    html = _page(client, type="FAILED")
    assert a.job_id in html and b.job_id not in html
    html = _page(client, job=b.job_id)
    assert b.job_id in html and a.job_id not in html
    html = _page(client, actor="planner-1")
    assert "run-77" in html and a.job_id not in html
    html = _page(client, run="run-77")
    assert "RUN_PLANNED" in html and "REQUESTED" not in html


def test_audit_filters_by_time_range(client, viewer) -> None:
    now = transitions.db_now()
    old = make_job("noop", at=now - dt.timedelta(days=2))
    new = make_job("noop", at=now)
    since = (now - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    html = _page(client, after=since)
    assert new.job_id in html and old.job_id not in html
    html = _page(client, before=since)
    assert old.job_id in html and new.job_id not in html


def test_audit_links_to_subject(client, viewer) -> None:
    job = make_job("noop")
    html = _page(client, job=job.job_id)
    assert f'href="{reverse("console:job_detail", args=[job.job_id])}"' in html


def test_audit_newest_first(client, viewer) -> None:
    job = make_job("save", state=JobState.SUCCEEDED)
    html = _page(client, job=job.job_id)
    assert html.index("SUCCEEDED") < html.index("REQUESTED")


def test_audit_page_bounded_queries(client, viewer, django_assert_max_num_queries) -> None:
    for _ in range(30):
        make_job("noop")  # 60 events: more than one page
    with django_assert_max_num_queries(8):
        response = client.get(reverse("console:event_list"))
    assert "Next →" in response.content.decode()


def test_audit_export_streams_only_filtered_rows(client, viewer) -> None:
    a = make_job("save", state=JobState.FAILED)
    make_job("noop")
    response = client.get(reverse("console:event_export"), {"job": a.job_id})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:4] == ["event_id", "created_at", "event_type", "actor"]
    assert {row[4] for row in rows[1:]} == {a.job_id}
    expected = AuditEvent.objects.filter(job_id=a.job_id).count()
    assert len(rows) - 1 == expected


def test_audit_export_neutralises_formulas(client, viewer) -> None:
    record_event(event_type=EventType.OPERATOR_ACTION, actor="=HYPERLINK(1)", job_id="j-csv")
    response = client.get(reverse("console:event_export"), {"job": "j-csv"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[1][3] == "'=HYPERLINK(1)"


def test_audit_requires_view_permission(client) -> None:
    login(client, "nobody")
    assert client.get(reverse("console:event_list")).status_code == 403
    assert client.get(reverse("console:event_export")).status_code == 403
