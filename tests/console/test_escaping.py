"""User-supplied text (payload fields, ids, reasons) is escaped wherever the console shows it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from inbox.models import JobState
from tests.console.pagekit import XSS, XSS_ESCAPED, action_form, hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def hostile(client: Client):
    """A FAILED job whose content, object id and mission carry markup, retried with a hostile
    reason, then failed again so it is retryable in the bulk preview."""
    login(client, "ops", "operator")
    job = make_job("save", state=JobState.FAILED, content=XSS, object_id=XSS, mission_id=XSS)
    url = reverse("console:job_retry", args=[job.job_id])
    assert client.post(url, action_form(XSS)).status_code == 200
    return job


def _assert_escaped(html: str, where: str) -> None:
    assert XSS not in html, where
    assert XSS_ESCAPED in html or "\\u003cscript" in html, where


def test_escaping_every_page_shows_hostile_text_escaped(client, hostile) -> None:
    pages = {
        "jobs list": reverse("console:job_list") + "?mission=" + XSS,
        "jobs search": reverse("console:job_list") + "?q=" + XSS,
        "job detail": reverse("console:job_detail", args=[hostile.job_id]),
        "job trail": reverse("console:job_detail", args=[hostile.job_id]),
        "audit": reverse("console:event_list") + "?job=" + hostile.job_id,
        "audit by actor": reverse("console:event_list") + "?actor=" + XSS,
        "bulk preview": reverse("console:bulk_preview") + "?mode=matching&mission=" + XSS,
    }
    for where, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, where
        html = response.content.decode()
        if where in ("audit by actor", "bulk preview"):
            # The filter value is echoed back in the form; it must be escaped there too.
            assert XSS not in html, where
            continue
        _assert_escaped(html, where)


def test_escaping_reason_in_trail_and_audit(client, hostile) -> None:
    detail = client.get(
        reverse("console:job_detail", args=[hostile.job_id]), headers=hx("job-trail")
    )
    html = detail.content.decode()
    assert "Reason: " + XSS_ESCAPED in html
    audit = client.get(reverse("console:event_list"), {"job": hostile.job_id, "type": "RETRIED"})
    _assert_escaped(audit.content.decode(), "audit reason")


def test_escaping_action_messages(client, hostile) -> None:
    """A refusal message quotes the job; the region renders it escaped."""
    url = reverse("console:job_retry", args=[hostile.job_id])
    response = client.post(url, action_form(XSS), headers=hx("job-actions"))
    assert response.status_code == 409  # READY now: retry refused
    assert XSS not in response.content.decode()
