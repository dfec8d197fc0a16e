"""The dashboard: counts by state, alert tiles, throughput chart, active runs; bounded cost."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse

from core import paging
from inbox import selectors, transitions
from inbox.models import JobState, ScopePause, Worker
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def test_state_counts_one_query_and_capped(django_assert_num_queries, monkeypatch) -> None:
    monkeypatch.setattr(paging, "COUNT_CAP", 2)
    for _ in range(4):
        make_job("noop")
    make_job("save", state=JobState.FAILED)
    with django_assert_num_queries(1):
        counts = dict(selectors.state_counts())
    assert counts["READY"] == 3  # capped at COUNT_CAP + 1: shown as "2+"
    assert counts["FAILED"] == 1
    assert counts["RECONCILED"] == 0
    assert paging.count_label(counts["READY"]) == "2+"


def test_dashboard_counts_link_to_filtered_list(client, viewer) -> None:
    make_job("save", state=JobState.FAILED)
    html = client.get(reverse("console:home"), headers=hx("dashboard-counts")).content.decode()
    assert 'href="/jobs/?state=FAILED"' in html
    assert re.search(
        r'<span class="n">1</span><span class="k"><span class="state state-FAILED"', html
    )


def test_dashboard_alerts_count_each_condition(client, viewer) -> None:
    now = transitions.db_now()
    make_job("delete", state=JobState.OUTCOME_UNKNOWN)
    make_job("save", state=JobState.CLAIMED, at=now - dt.timedelta(seconds=120))
    make_job("delete", state=JobState.CREATED)
    ScopePause.objects.create(scope="delete", paused=True, changed_by="ops", reason="maint")
    Worker.objects.create(
        worker_id="w-dead", kind="executor", host="h", pid=1, poll_seconds=1, lease_seconds=5
    )
    Worker.objects.filter(worker_id="w-dead").update(last_seen_at=now - dt.timedelta(hours=1))
    alerts = selectors.dashboard_alerts(transitions.db_now())
    assert (alerts.unknown, alerts.lapsed, alerts.pending_approvals) == (1, 1, 1)
    assert alerts.dead_workers == 1
    assert alerts.paused_scopes == ["delete"]
    html = client.get(reverse("console:home"), headers=hx("dashboard-alerts")).content.decode()
    assert 'href="/jobs/?lease=lapsed"' in html
    assert "Paused scopes: delete" in html


def test_throughput_buckets_finished_jobs_by_minute(client, viewer) -> None:
    now = transitions.db_now()
    make_job("save", state=JobState.SUCCEEDED, at=now - dt.timedelta(minutes=10))
    make_job("save", state=JobState.FAILED, at=now - dt.timedelta(minutes=10))
    make_job("save", state=JobState.SUCCEEDED, at=now - dt.timedelta(hours=2))
    throughput = selectors.throughput_per_minute(now)
    points = throughput.points
    assert throughput.partial_through == ""
    assert len(points) == 60
    assert sum(n for _, n in points) == 2
    label = (now - dt.timedelta(minutes=10)).strftime("%H:%M")
    assert dict(points)[label] == 2
    html = client.get(reverse("console:home"), headers=hx("dashboard-throughput")).content.decode()
    assert html.count("<rect ") == 60
    assert f"<title>{label}: 2</title>" in html


def test_throughput_reads_at_most_cap_rows_per_state_and_says_where_it_cut(client) -> None:
    now = transitions.db_now()
    for minutes_ago in (1, 2, 3, 4, 5):
        make_job("save", state=JobState.SUCCEEDED, at=now - dt.timedelta(minutes=minutes_ago))
    make_job("save", state=JobState.FAILED, at=now - dt.timedelta(minutes=5))

    throughput = selectors.throughput_per_minute(now, cap=3)

    counts = dict(throughput.points)
    # The newest three SUCCEEDED (1–3 minutes ago) and the one FAILED (under the cap).
    assert sum(counts.values()) == 4
    assert counts[(now - dt.timedelta(minutes=5)).strftime("%H:%M")] == 1
    assert counts[(now - dt.timedelta(minutes=4)).strftime("%H:%M")] == 0
    assert throughput.partial_through == (now - dt.timedelta(minutes=3)).strftime("%H:%M")
    assert selectors.throughput_per_minute(now, cap=10).partial_through == ""


def test_throughput_is_one_query(django_assert_num_queries) -> None:
    now = transitions.db_now()
    with django_assert_num_queries(1):
        selectors.throughput_per_minute(now)


def test_dashboard_full_page_bounded_queries(client, viewer, django_assert_max_num_queries) -> None:
    make_job("save", state=JobState.FAILED)
    with django_assert_max_num_queries(14):
        response = client.get(reverse("console:home"))
    assert response.status_code == 200


def test_dashboard_requires_login(client) -> None:
    response = client.get(reverse("console:home"))
    assert response.status_code == 302


class _OneGroup:
    """A consolidator stub: one group of two members, so the planned run stays active."""

    name = "stub"

    def check(self) -> None:
        return None

    def plan(self, *, store, carry_over):
        from runs.consolidators import PlannedGroup, PlannedMember

        return [PlannedGroup(key="k", members=(PlannedMember("a"), PlannedMember("b")))]

    def decide(self, *, run, group, members):
        return {m.id: "keep" for m in members}


def test_dashboard_runs_show_lease_bar(client, viewer) -> None:
    from runs.transitions import plan_run

    run = plan_run(
        store="notes", owner="consolidator-1", lease_seconds=120, consolidator=_OneGroup()
    )
    html = client.get(reverse("console:home"), headers=hx("dashboard-runs")).content.decode()
    assert f'id="lease-bar-{run.run_id}"' in html
    assert '<progress max="120"' in html
    assert "consolidator-1" in html
    assert 'href="/runs/?store=notes"' in html


def test_dashboard_stopped_worker_is_not_dead() -> None:
    now = transitions.db_now()
    for worker_id, status in (("w-stopped", "stopped"), ("w-alive", "running")):
        Worker.objects.create(worker_id=worker_id, kind="executor", host="h", pid=1, status=status)
    Worker.objects.filter(worker_id="w-stopped").update(last_seen_at=now - dt.timedelta(days=1))
    assert selectors.dashboard_alerts(transitions.db_now()).dead_workers == 0
