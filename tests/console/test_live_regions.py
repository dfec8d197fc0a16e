"""Live regions that poll on their own: the dashboard's five regions, the workers'
processes table and a store's live block on the runs page. Each carries its version; a poll
that sends it back while nothing changed gets 204 and no body, a change makes it 200 again with
the new version, and a poll never writes."""

from __future__ import annotations

import datetime as dt
import html
import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inbox import transitions
from inbox.models import JobState, Worker
from inbox.workers import beat, register_worker
from runs.consolidators import PlannedGroup, PlannedMember
from runs.models import RunStatus
from runs.transitions import close_run, plan_run
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db

DASHBOARD_REGIONS = (
    "dashboard-alerts",
    "dashboard-runs",
    "dashboard-counts",
    "dashboard-throughput",
    "dashboard-ready",
)


class OneGroup:
    name = "one-group"

    def plan(self, *, store, carry_over):
        return [PlannedGroup("k", (PlannedMember("a.md"), PlannedMember("b.md")))]


@pytest.fixture
def viewer(client):
    return login(client, "look", "viewer")


def _poller(page: str, elt_id: str) -> tuple[str, str]:
    """The URL and version the element ``elt_id`` polls with."""
    tag = re.search(rf'<[a-z]+ id="{elt_id}"[^>]*>', page).group(0)
    assert "data-poll" in tag and "every " in tag
    url = html.unescape(re.search(r'hx-get="([^"]*)"', tag).group(1))
    return url, re.search(r'data-v="([^"]*)"', tag).group(1)


def _poll(client, elt_id: str, url: str, version: str | None):
    if version is not None:
        url += ("&" if "?" in url else "?") + f"v={version}"
    return client.get(url, headers=hx(elt_id))


def _writes(captured: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]


@pytest.mark.parametrize("region", DASHBOARD_REGIONS)
def test_dashboard_region_poll_unchanged_is_204_without_body_or_writes(client, viewer, region):
    make_job("noop")
    url, version = _poller(client.get(reverse("console:home")).content.decode(), region)
    with CaptureQueriesContext(connection) as captured:
        response = _poll(client, region, url, version)
    assert response.status_code == 204
    assert response.content == b""
    assert _writes(captured) == []


@pytest.mark.parametrize("region", DASHBOARD_REGIONS)
def test_dashboard_region_poll_without_a_version_renders_it(client, viewer, region):
    url, _version = _poller(client.get(reverse("console:home")).content.decode(), region)
    response = _poll(client, region, url, None)
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith(f'<section id="{region}"')


def test_dashboard_counts_poll_after_a_new_job_is_200_with_the_new_version(client, viewer):
    make_job("noop")
    url, version = _poller(client.get(reverse("console:home")).content.decode(), "dashboard-counts")
    make_job("noop")
    response = _poll(client, "dashboard-counts", url, version)
    assert response.status_code == 200
    assert _poller(response.content.decode(), "dashboard-counts")[1] != version
    # The new version is what the next poll sends: unchanged since, so 204.
    new_version = _poller(response.content.decode(), "dashboard-counts")[1]
    assert _poll(client, "dashboard-counts", url, new_version).status_code == 204


def test_dashboard_alerts_poll_after_an_unknown_outcome_is_200(client, viewer):
    url, version = _poller(client.get(reverse("console:home")).content.decode(), "dashboard-alerts")
    make_job("save", JobState.OUTCOME_UNKNOWN)
    response = _poll(client, "dashboard-alerts", url, version)
    assert response.status_code == 200
    assert re.search(r'<span class="n">1</span><span class="k">Unknown outcomes', response.text)


def test_dashboard_runs_poll_after_a_close_is_200(client, viewer):
    run = plan_run(store="archive", owner="o-1", lease_seconds=3600, consolidator=OneGroup())
    url, version = _poller(client.get(reverse("console:home")).content.decode(), "dashboard-runs")
    assert _poll(client, "dashboard-runs", url, version).status_code == 204
    close_run(run.run_id, status=RunStatus.ABANDONED, actor="ops", reason="test")
    response = _poll(client, "dashboard-runs", url, version)
    assert response.status_code == 200
    assert "No active run." in response.text


def test_workers_table_poll_unchanged_is_204_and_a_heartbeat_makes_it_200(client, viewer):
    register_worker(worker_id="w-1", kind="executor", scope="save", lease_seconds=60)
    page = client.get(reverse("console:workers")).content.decode()
    url, version = _poller(page, "workers-table")
    with CaptureQueriesContext(connection) as captured:
        response = _poll(client, "workers-table", url, version)
    assert response.status_code == 204
    assert response.content == b""
    assert _writes(captured) == []
    # A heartbeat with progress: the table changed (jobs done, last seen).
    beat(worker_id="w-1", jobs_done=3)
    response = _poll(client, "workers-table", url, version)
    assert response.status_code == 200
    assert _poller(response.content.decode(), "workers-table")[1] != version


def test_workers_last_seen_ticks_in_the_browser_from_the_servers_age(client, viewer):
    register_worker(worker_id="w-1", kind="executor", scope="save", lease_seconds=60)
    Worker.objects.filter(worker_id="w-1").update(
        last_seen_at=transitions.db_now() - dt.timedelta(seconds=125)
    )
    page = client.get(reverse("console:workers")).content.decode()
    assert re.search(r'data-age="12[56]">2 min ago<', page)


def test_store_live_poll_unchanged_is_204_and_a_close_makes_it_200(client, viewer):
    run = plan_run(store="archive", owner="o-1", lease_seconds=3600, consolidator=OneGroup())
    page = client.get(reverse("console:runs")).content.decode()
    live_id = re.search(r'<div id="(live-[0-9a-f]+)"', page).group(1)
    url, version = _poller(page, live_id)
    with CaptureQueriesContext(connection) as captured:
        response = _poll(client, live_id, url, version)
    assert response.status_code == 204
    assert response.content == b""
    assert _writes(captured) == []
    close_run(run.run_id, status=RunStatus.ABANDONED, actor="ops", reason="test")
    response = _poll(client, live_id, url, version)
    assert response.status_code == 200
    assert "abandoned" in response.text
    assert _poller(response.content.decode(), live_id)[1] != version


def test_dashboard_ready_poll_is_204_while_the_oldest_age_reads_the_same(client, viewer):
    """The region words the oldest READY job's age in minutes: seconds passing change nothing."""
    make_job("noop", at=transitions.db_now() - dt.timedelta(seconds=10 * 60 + 30))
    url, version = _poller(client.get(reverse("console:home")).content.decode(), "dashboard-ready")
    time.sleep(1.1)  # the oldest job is a second older: the words are the same
    assert _poll(client, "dashboard-ready", url, version).status_code == 204
    make_job("noop")
    response = _poll(client, "dashboard-ready", url, version)
    assert response.status_code == 200
    assert "oldest waits 10 min" in response.text
