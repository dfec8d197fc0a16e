"""Charts, times and errors in place: a labelled throughput chart
with a series per scope and the failed / unknown share; the READY backlog's age per scope; times
with their zone and age; forms that let the browser check a required reason, and no script
that swaps an error page over the document."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.template import Context, Template
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inbox import selectors, transitions
from inbox.models import JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def test_throughput_splits_by_scope_and_counts_failed_and_unknown(client, viewer):
    now = transitions.db_now()
    at = now - dt.timedelta(minutes=3)
    make_job("save", JobState.SUCCEEDED, at=at)
    make_job("save", JobState.FAILED, at=at)
    make_job("noop", JobState.SUCCEEDED, at=at)
    make_job("delete", JobState.OUTCOME_UNKNOWN, at=at)
    throughput = selectors.throughput_per_minute(now)
    index = [label for label, _n in throughput.points].index(at.strftime("%H:%M"))
    assert throughput.points[index][1] == 4
    assert {scope: series[index] for scope, series in throughput.by_scope.items()} == {
        "delete": 1,
        "noop": 1,
        "save": 2,
    }
    assert throughput.bad[index] == 2
    assert throughput.bad_rate[index] == 0.5
    assert throughput.bad_rate[index - 1] is None  # nothing finished: no rate, not 0 %


def test_throughput_chart_has_labelled_axes_a_line_per_scope_and_the_rate(client, viewer):
    at = transitions.db_now() - dt.timedelta(minutes=2)
    for _ in range(3):
        make_job("save", JobState.SUCCEEDED, at=at)
    make_job("noop", JobState.FAILED, at=at)
    html = client.get(reverse("console:home"), headers=hx("dashboard-throughput")).content.decode()
    assert ">jobs / min</text>" in html
    assert ">% failed or unknown</text>" in html
    # The left axis: 0, half and a round top (4 jobs in the busiest minute → 5).
    for tick in (">0</text>", ">2.5</text>", ">5</text>"):
        assert tick in html
    assert html.count('<polyline class="series ') == 2
    assert "<title>scope save</title>" in html and "<title>scope noop</title>" in html
    assert 'class="rate"' in html
    assert "scope save</li>" in html and "failed or unknown, % of finished" in html
    assert "style=" not in html  # strict CSP: classes, not inline styles


def test_ready_age_per_scope_in_one_query_with_the_oldest_age(django_assert_num_queries):
    now = transitions.db_now()
    make_job("save", at=now - dt.timedelta(minutes=20))
    make_job("save", at=now - dt.timedelta(seconds=10))
    make_job("noop", at=now - dt.timedelta(hours=2))
    with django_assert_num_queries(1):
        ages = {age.scope: age for age in selectors.ready_age_by_scope(now)}
    assert ages["save"].oldest_seconds == 20 * 60
    assert dict(ages["save"].buckets) == {"<1m": 1, "1–5m": 0, "5–15m": 0, "15–60m": 1, "≥1h": 0}
    assert dict(ages["noop"].buckets)["≥1h"] == 1
    assert ages["delete"].oldest_seconds is None


def test_dashboard_ready_region_draws_a_chart_per_scope(client, viewer):
    make_job("save", at=transitions.db_now() - dt.timedelta(minutes=20))
    html = client.get(reverse("console:home"), headers=hx("dashboard-ready")).content.decode()
    assert html.strip().startswith('<section id="dashboard-ready"')
    # A chart for the scope with a backlog; the empty scopes say so in words.
    assert html.count('<svg class="chart-small"') == 1
    assert "oldest waits 20 min" in html
    assert "nothing waiting" in html


def test_when_shows_zone_and_a_ticking_age():
    now = dt.datetime(2026, 12, 1, 12, 10, 0, tzinfo=dt.UTC)
    value = now - dt.timedelta(minutes=3, seconds=4)
    html = Template("{% load console_tags %}{% when value now %}").render(
        Context({"value": value, "now": now})
    )
    assert '<time datetime="2026-12-01T12:06:56+00:00"' in html
    assert ">2026-12-01 12:06:56 UTC</time>" in html
    assert '<span class="age muted" data-age="184">3 min ago</span>' in html


def test_job_page_times_carry_their_zone(client, viewer):
    job = make_job("save", JobState.FAILED)
    html = client.get(reverse("console:job_detail", args=[job.job_id])).content.decode()
    assert re.search(r"\d\d:\d\d:\d\d UTC</time> <span class=\"age muted\"", html)


# --- errors in place ----------------------------------------------------------------------------


def test_no_page_loads_the_debug_script_that_swaps_error_pages_over_the_document(
    client, viewer, settings
):
    settings.DEBUG = True
    html = client.get(reverse("console:home")).content.decode()
    assert "django-htmx.js" not in html
    assert "htmx-2.min.js" in html


def test_no_button_posts_by_itself_so_the_browser_checks_required_reasons(client):
    """htmx only runs the browser's form validation when the form is submitted: a button with
    its own hx-post skips ``required``. Every action form carries hx-post; buttons use
    formaction."""
    from tests.console.test_trouble import _run

    login(client, "admin", superuser=True)
    failed = make_job("save", JobState.FAILED)
    ready = make_job("save", JobState.READY)
    make_job("delete", JobState.CREATED, requested_by="operator")
    make_job("delete", JobState.OUTCOME_UNKNOWN)
    _run(owner="gone")
    pages = [
        reverse("console:home"),
        reverse("console:job_list"),
        reverse("console:job_detail", args=[failed.job_id]),
        reverse("console:job_detail", args=[ready.job_id]),
        reverse("console:reconcile"),
        reverse("console:approvals"),
        reverse("console:runs"),
        reverse("console:workers"),
    ]
    for url in pages:
        html = client.get(url).content.decode()
        for button in re.findall(r"<button[^>]*>", html):
            assert "hx-post" not in button, (url, button)
        for form in re.findall(r'<form[^>]*method="post"[^>]*>', html):
            if "logout" in form:
                continue
            assert "hx-post=" in form, (url, form)


def test_ready_age_oldest_is_the_first_claim_index_entry_not_an_aggregate():
    """The oldest READY job per scope is read as the first entry of the claim index
    (``ORDER BY created_at LIMIT 1``). As ``MIN(created_at)``, PostgreSQL with a row estimate
    of 1 (statistics behind a fresh backlog) planned a scan of every READY entry of the scope:
    61 ms at 130,000 waiting, on every poll of the dashboard."""
    now = transitions.db_now()
    make_job("save", at=now - dt.timedelta(minutes=3))
    make_job("save", at=now - dt.timedelta(minutes=1))
    with CaptureQueriesContext(connection) as captured:
        ages = {age.scope: age for age in selectors.ready_age_by_scope(now)}
    assert ages["save"].oldest_seconds == 3 * 60
    [sql] = [q["sql"] for q in captured.captured_queries]
    assert "MIN(" not in sql.upper()
    assert sql.count("ORDER BY created_at LIMIT 1") == len(ages)
