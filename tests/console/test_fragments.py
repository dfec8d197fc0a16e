"""Fragment views: an HTMX request gets only its region (root element id = region name);
a normal request gets the whole page with that region inside it."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from inbox.models import JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(client: Client):
    login(client, "ops", "operator")
    return make_job("save", state=JobState.CLAIMED)


def _root_id(html: str) -> str:
    match = re.match(r"\s*<(\w+)[^>]*\bid=\"([^\"]+)\"", html)
    assert match, html[:200]
    return match.group(2)


def _cases(job_id: str) -> list[tuple[str, str | None, str]]:
    detail = reverse("console:job_detail", args=[job_id])
    return [
        (reverse("console:home"), "dashboard-counts", "dashboard-counts"),
        (reverse("console:home"), "dashboard-alerts", "dashboard-alerts"),
        (reverse("console:home"), "dashboard-throughput", "dashboard-throughput"),
        (reverse("console:home"), "dashboard-runs", "dashboard-runs"),
        (reverse("console:job_list"), "job-table", "job-table"),
        (reverse("console:job_list") + "?state=READY&sort=-updated_at", None, "job-table"),
        (detail, "job-summary", "job-summary"),
        (detail, "job-trail", "job-trail"),
        (detail, "job-actions", "job-actions"),
        (reverse("console:job_lease", args=[job_id]), "lease-countdown", "lease-countdown"),
        (reverse("console:bulk_preview"), "bulk-preview", "bulk-preview"),
        (reverse("console:event_list") + "?type=CLAIMED", "audit-table", "audit-table"),
    ]


def test_fragments_htmx_request_returns_only_region(client: Client, job) -> None:
    for url, target, region in _cases(job.job_id):
        response = client.get(url, headers=hx(target))
        assert response.status_code == 200, url
        html = response.content.decode()
        assert "<html" not in html, url
        assert "<nav" not in html.split(f'id="{region}"')[0], url
        assert _root_id(html) == region, url


def test_fragments_normal_request_returns_full_page(client: Client, job) -> None:
    for url, _target, region in _cases(job.job_id):
        if "lease" in url:
            continue  # the lease endpoint is a fragment only; the detail page embeds it
        response = client.get(url)
        html = response.content.decode()
        assert response.status_code == 200, url
        assert html.startswith("<!doctype html>"), url
        assert f'id="{region}"' in html, url
        assert 'hx-headers=\'{"X-CSRFToken"' in html


def test_fragments_pollers_target_themselves(client: Client, job) -> None:
    """Each poller has its own hx-target (htmx inherits targets) and no eval'd filter (CSP)."""
    for url in (reverse("console:home"), reverse("console:job_detail", args=[job.job_id])):
        html = client.get(url).content.decode()
        pollers = re.findall(r"<[^>]*hx-trigger=\"[^\"]*every [^>]*>", html)
        assert pollers, url
        for tag in pollers:
            assert 'hx-target="this"' in tag, tag
            assert "data-poll" in tag, tag
            assert "[" not in tag.split("hx-trigger=")[1].split('"')[1], tag


def test_fragments_pages_have_no_inline_script_or_hx_on(client: Client, job) -> None:
    for url, _target, _region in _cases(job.job_id):
        html = client.get(url).content.decode()
        for tag in re.findall(r"<script[^>]*>", html):
            assert "src=" in tag, (url, tag)
        assert "hx-on" not in html, url
        assert "style=" not in html, url


def test_fragments_history_restore_gets_full_page(client: Client, job) -> None:
    """Back button after an htmx history-cache miss: htmx swaps the answer into <body>."""
    for url, target, _region in _cases(job.job_id):
        if "lease" in url:
            continue
        headers = {**hx(target), "HX-History-Restore-Request": "true"}
        html = client.get(url, headers=headers).content.decode()
        assert html.startswith("<!doctype html>"), url
