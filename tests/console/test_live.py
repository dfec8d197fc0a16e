"""Live pages: a poll costs a few small queries and no rendering while nothing
changed (204); a change comes back as the rows, or as every panel of a job's page at once; a
terminal job's page stops polling."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inbox import transitions
from inbox.models import JobState
from tests.console.pagekit import hx, login
from tests.factories import WORKER, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def _poll_of(html: str, region: str) -> tuple[str, str]:
    """The poll URL and version a region's poller carries."""
    tag = re.search(rf'<tbody id="{region}"[^>]*>', html).group(0)
    url = re.search(r'hx-get="([^"]*)"', tag).group(1).replace("&amp;", "&")
    version = re.search(r'data-v="([^"]*)"', tag).group(1)
    return url, version


def test_job_rows_poll_unchanged_is_204_with_a_few_queries_and_no_rendering(client, viewer):
    make_job("save", JobState.CLAIMED)
    for _ in range(5):
        make_job("noop")
    html = client.get(reverse("console:job_list")).content.decode()
    url, version = _poll_of(html, "job-rows")
    assert "from_row=" in url and "top=1" in url
    with CaptureQueriesContext(connection) as captured:
        response = client.get(
            reverse("console:job_list") + url + f"&v={version}", headers=hx("job-rows")
        )
    assert response.status_code == 204
    assert response.content == b""
    # 4 for the session, user and permissions (every page), 4 the poll's own: the database
    # clock, the page, its holders' heartbeats and the capped count of newer rows.
    assert len(captured.captured_queries) <= 8


def test_job_rows_poll_after_a_change_returns_the_rows_with_the_new_version(client, viewer):
    job = make_job("save", JobState.CLAIMED)
    html = client.get(reverse("console:job_list")).content.decode()
    url, version = _poll_of(html, "job-rows")
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    response = client.get(
        reverse("console:job_list") + url + f"&v={version}", headers=hx("job-rows")
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.strip().startswith('<tbody id="job-rows"')
    assert "EXECUTING" in body
    assert _poll_of(body, "job-rows")[1] != version


def test_job_rows_poll_of_the_first_page_counts_new_jobs_without_shifting_rows(client, viewer):
    shown = [make_job("noop") for _ in range(3)]
    html = client.get(reverse("console:job_list")).content.decode()
    url, version = _poll_of(html, "job-rows")
    newcomer = make_job("noop")
    body = client.get(
        reverse("console:job_list") + url + f"&v={version}", headers=hx("job-rows")
    ).content.decode()
    assert "1 new job since this page loaded" in body
    # The page keeps its rows (anchored at its first row); the newcomer is only counted.
    assert newcomer.job_id not in body
    assert all(job.job_id in body for job in shown)


def _watch(html: str) -> tuple[str, str]:
    tag = re.search(r'<div id="job-watch"[^>]*>', html).group(0)
    url = re.search(r'hx-get="([^"]*)"', tag)
    return (url.group(1) if url else ""), re.search(r'data-v="([^"]*)"', tag).group(1)


def test_job_watch_unchanged_is_204_in_four_small_queries(client, viewer):
    job = make_job("save", JobState.CLAIMED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    url, version = _watch(html)
    assert url
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, {"v": version}, headers=hx("job-watch"))
    assert response.status_code == 204
    # 4 for the session, user and permissions (every page), 4 the poll's own: the job by its
    # key, the clock, the holder's heartbeat and the newest event id (an index probe).
    assert len(captured.captured_queries) <= 8
    # Nothing reads the payload (a SAVE's content can be megabytes, every 3 s per watcher).
    assert not any('"payload"' in q["sql"] for q in captured.captured_queries)


def test_job_watch_after_a_change_refreshes_every_panel_out_of_band(client, viewer):
    job = make_job("save", JobState.CLAIMED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    url, version = _watch(html)
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    transitions.complete_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    body = client.get(url, {"v": version}, headers=hx("job-watch")).content.decode()
    for region in ("job-summary", "job-actions", "job-attempts", "job-trail", "job-watch"):
        assert re.search(rf'id="{region}"[^>]*hx-swap-oob="true"', body), region
    assert "SUCCEEDED" in body
    assert "(holding)" not in body
    # Terminal: the new watcher has no trigger, so the page stops polling.
    new_url, _version = _watch(body)
    assert new_url == ""
    assert "no longer refreshes" in body


def test_job_page_of_a_terminal_job_does_not_poll(client, viewer):
    job = make_job("save", JobState.SUCCEEDED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert "every " not in re.search(r'<div id="job-watch"[^>]*>', html).group(0)
    assert 'hx-trigger="every' not in html


def test_job_page_of_a_failed_job_keeps_polling(client, viewer):
    """FAILED is not terminal: an operator may retry it from another tab."""
    job = make_job("save", JobState.FAILED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert _watch(html)[0]


def test_audit_poll_unchanged_is_204_and_counts_new_events(client, viewer):
    make_job("noop")
    html = client.get(reverse("console:event_list")).content.decode()
    url, version = _poll_of(html, "audit-rows")
    poll = reverse("console:event_list") + url + f"&v={version}"
    assert client.get(poll, headers=hx("audit-rows")).status_code == 204
    make_job("noop")  # REQUESTED + READY
    body = client.get(poll, headers=hx("audit-rows")).content.decode()
    assert "2 new events since this page loaded" in body
