"""Keyset pagination: the jobs list and the audit log page by cursor, never OFFSET;
pages are stable under inserts; a bad or stale cursor is a 404 or the last page, never a 500."""

from __future__ import annotations

import datetime as dt
import re
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console import keyset
from console.jobs import ORDERINGS
from inbox import transitions
from inbox.models import Job
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def _ids(html: str) -> list[str]:
    return re.findall(r'name="job_ids" value="([^"]+)"', html)


def _link(html: str, rel: str) -> str | None:
    match = re.search(rf'rel="{rel}" href="([^"]+)"', html)
    return unescape(match.group(1)) if match else None


def _walk(client: Client, params: dict[str, str], per_page_rows: int) -> list[str]:
    """Follow "Next →" from the first page to the last; every job id seen, in order."""
    url = reverse("console:job_list") + "?" + "&".join(f"{k}={v}" for k, v in params.items())
    seen: list[str] = []
    for _ in range(50):
        html = client.get(url, headers=hx("job-table")).content.decode()
        rows = _ids(html)
        assert len(rows) <= per_page_rows
        seen += rows
        nxt = _link(html, "next")
        if nxt is None:
            return seen
        url = reverse("console:job_list") + nxt
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("sort", sorted(ORDERINGS))
def test_job_list_next_links_visit_every_row_once_in_order(client, viewer, monkeypatch, sort):
    monkeypatch.setattr("console.jobs.PER_PAGE", 4)
    base = transitions.db_now()
    # Same-millisecond twins and db_default times (SQLite stores those with 3 digits, Python's
    # with 6): the cursor must carry each time as stored or rows are skipped or repeated.
    jobs = [make_job("noop", at=base - dt.timedelta(seconds=i // 2)) for i in range(7)]
    jobs += [make_job("save") for _ in range(4)]
    jobs.append(make_job("save", "FAILED"))
    seen = _walk(client, {"sort": sort}, 4)
    assert sorted(seen) == sorted(job.job_id for job in jobs)
    ordering = ORDERINGS[sort]
    expected = list(Job.objects.order_by(*ordering.order_by()).values_list("job_id", flat=True))
    assert seen == expected


def test_job_list_previous_link_returns_the_page_before(client, viewer, monkeypatch):
    monkeypatch.setattr("console.jobs.PER_PAGE", 3)
    for _ in range(8):
        make_job("noop")
    first = client.get(reverse("console:job_list"), headers=hx("job-table")).content.decode()
    second = client.get(reverse("console:job_list") + _link(first, "next")).content.decode()
    back = client.get(reverse("console:job_list") + _link(second, "prev")).content.decode()
    assert _ids(back) == _ids(first)
    assert "⇤ Newest" in second and "⇤ Newest" not in first


def test_job_list_next_page_is_stable_when_jobs_arrive_meanwhile(client, viewer, monkeypatch):
    monkeypatch.setattr("console.jobs.PER_PAGE", 3)
    for _ in range(7):
        make_job("noop")
    first = client.get(reverse("console:job_list")).content.decode()
    url = reverse("console:job_list") + _link(first, "next")
    before = _ids(client.get(url).content.decode())
    for _ in range(5):
        make_job("noop")  # newer rows: an OFFSET page 2 would now show rows of the old page 1
    assert _ids(client.get(url).content.decode()) == before


def test_job_list_pages_never_use_offset(client, viewer, monkeypatch):
    monkeypatch.setattr("console.jobs.PER_PAGE", 2)
    for _ in range(7):
        make_job("noop")
    url = reverse("console:job_list")
    with CaptureQueriesContext(connection) as captured:
        html = client.get(url).content.decode()
        for _ in range(2):
            html = client.get(url + _link(html, "next")).content.decode()
    sql = " ".join(q["sql"] for q in captured.captured_queries).upper()
    assert 'FROM "INBOX_JOB"' in sql
    assert " OFFSET " not in sql


@pytest.mark.parametrize(
    "query",
    [
        "after_row=not-base64!!",
        "after_row=" + "A" * 3000,
        "before_row=WyJ4Il0",  # ["x"]: the wrong shape
        "from_row=WzEsMl0",  # [1, 2]
    ],
)
def test_job_list_bad_cursor_is_404_not_500(client, viewer, query):
    make_job("noop")
    response = client.get(reverse("console:job_list") + "?" + query)
    assert response.status_code == 404


def test_job_list_cursor_of_another_sort_is_404(client, viewer):
    job = make_job("noop")
    cursor = keyset.encode(ORDERINGS["job_id"], [job.job_id])
    url = reverse("console:job_list") + f"?sort=-created_at&after_row={cursor}"
    assert client.get(url).status_code == 404


def test_job_list_cursor_past_the_end_answers_the_last_page(client, viewer, monkeypatch):
    monkeypatch.setattr("console.jobs.PER_PAGE", 3)
    jobs = [make_job("noop") for _ in range(5)]
    # The oldest row's own cursor (as a page would write it): nothing is older.
    everything = keyset.paginate(Job.objects.all(), ORDERINGS["-created_at"], {}, per_page=10)
    cursor = everything.cursor_of(everything.rows[-1])
    response = client.get(reverse("console:job_list") + f"?after_row={cursor}")
    html = response.content.decode()
    assert response.status_code == 200
    assert "past the end of the list: this is the last page" in html
    assert len(_ids(html)) == 3
    assert set(_ids(html)) <= {job.job_id for job in jobs}
    assert "Next →" not in html


def test_job_list_old_page_numbers_are_ignored_not_500(client, viewer):
    make_job("noop")
    for page in ("2", "999999", "-1", "abc"):
        assert client.get(reverse("console:job_list"), {"page": page}).status_code == 200


def test_audit_next_links_visit_every_event_once(client, viewer, monkeypatch):
    from audit.models import AuditEvent

    monkeypatch.setattr("console.audit.PER_PAGE", 7)
    for _ in range(6):
        make_job("save", "SUCCEEDED")
    url = reverse("console:event_list")
    seen: list[str] = []
    with CaptureQueriesContext(connection) as captured:
        for _ in range(50):
            html = client.get(url).content.decode()
            seen += re.findall(r'<tr id="event-(\d+)"', html)
            nxt = _link(html, "next")
            if nxt is None:
                break
            url = reverse("console:event_list") + nxt
    expected = [
        str(n) for n in AuditEvent.objects.order_by("-event_id").values_list("pk", flat=True)
    ]
    assert seen == expected
    assert " OFFSET " not in " ".join(q["sql"] for q in captured.captured_queries).upper()


def test_audit_time_filter_and_cursor_do_not_collide(client, viewer):
    """The audit filter owns ``after`` / ``before`` (times); cursors are ``*_row``."""
    make_job("noop")
    since = (transitions.db_now() - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    response = client.get(reverse("console:event_list"), {"after": since})
    assert response.status_code == 200
    assert "REQUESTED" in response.content.decode()


def test_audit_bad_cursor_is_404(client, viewer):
    assert client.get(reverse("console:event_list") + "?after_row=WyIxIl0").status_code == 404


def _first_page_poll_after_a_new_job(client: Client, route: str, region: str) -> tuple[str, str]:
    """Open the first page of ``route``, make one job (rows above the page's first), poll the
    page's ``region`` as htmx does; returns the poll's HTML and its one capped COUNT query."""
    page = client.get(reverse(route)).content.decode()
    poll = unescape(re.search(rf'id="{region}"[^>]*hx-get="([^"]*)"', page).group(1))
    assert "top=1" in poll
    make_job("noop")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(route) + poll, headers=hx(region))
    assert response.status_code == 200
    [count] = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"]]
    return response.content.decode(), count


def _plan_without_seqscan(sql: str) -> str:
    """PostgreSQL's plan for ``sql`` with sequential scans off: a test table is a page long,
    where one is right; can an index serve the query? (At scale the ORDER BY makes it.)"""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute("EXPLAIN " + sql.replace("%", "%%"))
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")


def test_first_page_poll_counts_newer_rows_by_an_index_range(client, viewer):
    """The first page's poll counts the rows that arrived above it (capped). Unordered, the
    planner cannot size the row-value range and may choose a sequential scan that reads the
    whole table whenever nothing is newer (seen at 18,000 jobs: 8 ms a poll, every 5 s per
    operator). Counted in the order's index, nearest first, it is a range scan that stops at
    the cap."""
    for _ in range(3):
        make_job("noop")
    html, count = _first_page_poll_after_a_new_job(client, "console:job_list", "job-rows")
    assert "1 new job" in html
    # Nearest first along job_created_idx (the list sorts newest first).
    assert '"created_at" ASC, "inbox_job"."job_id" ASC LIMIT 100' in count, count
    if connection.vendor == "postgresql":
        plan = _plan_without_seqscan(count)
        assert "job_created_idx" in plan, plan


def test_audit_first_page_poll_counts_newer_events_by_a_primary_key_range(client, viewer):
    """The audit log's first-page poll counts the events that arrived above it (capped) along
    the primary key, nearest first. Unordered, a planner whose statistics lag the appends (a
    drain writes five events per job) sequentially scanned the whole log: 36 ms a poll at
    400,000 events, every 10 s per operator."""
    make_job("noop")
    html, count = _first_page_poll_after_a_new_job(client, "console:event_list", "audit-rows")
    # The new job's REQUESTED and READY events.
    assert "2 new events since this page loaded" in html
    assert 'ORDER BY "audit_auditevent"."event_id" ASC LIMIT 100' in count, count
    if connection.vendor == "postgresql":
        plan = _plan_without_seqscan(count)
        assert "audit_auditevent_pkey" in plan, plan
