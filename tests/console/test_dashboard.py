"""The dashboard: counts by state, alert tiles, throughput chart, active runs; bounded cost."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from core import paging
from inbox import selectors, transitions
from inbox.errors import LostClaim
from inbox.models import FinishedCount, Job, JobState, ScopePause, Worker
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
    assert len(points) == 60
    assert sum(n for _, n in points) == 2
    label = (now - dt.timedelta(minutes=10)).strftime("%H:%M")
    assert dict(points)[label] == 2
    html = client.get(reverse("console:home"), headers=hx("dashboard-throughput")).content.decode()
    assert html.count("<rect ") == 60
    assert f"<title>{label}: 2</title>" in html


def test_throughput_counts_endings_where_they_happened(client) -> None:
    """The chart counts executions that ended: a FAILED job retried and finished again counts
    in both minutes; a reconciled OUTCOME_UNKNOWN stays counted where it ended."""
    now = transitions.db_now()
    ago = {m: now - dt.timedelta(minutes=m) for m in (1, 2, 3)}
    failed = make_job("save", state=JobState.FAILED, at=ago[3])
    transitions.retry_job(failed.job_id, actor="op", reason="test: again", at=ago[2])
    claim = transitions.claim_job(failed.job_id, worker_id="w", lease_seconds=60, at=ago[2])
    transitions.begin_job(failed.job_id, claim_id=claim.claim_id, actor="w", at=ago[2])
    transitions.complete_job(failed.job_id, claim_id=claim.claim_id, actor="w", at=ago[1])
    make_job("delete", state=JobState.RECONCILED, at=ago[2])

    throughput = selectors.throughput_per_minute(now)

    counts = dict(throughput.points)
    label = {m: at.strftime("%H:%M") for m, at in ago.items()}
    assert (counts[label[3]], counts[label[2]], counts[label[1]]) == (1, 1, 1)
    bad = dict(zip([lb for lb, _n in throughput.points], throughput.bad, strict=True))
    assert (bad[label[3]], bad[label[2]], bad[label[1]]) == (1, 1, 0)
    assert throughput.by_scope == {
        "delete": [1 if lb == label[2] else 0 for lb, _n in throughput.points],
        "save": [1 if lb in (label[3], label[1]) else 0 for lb, _n in throughput.points],
    }


def test_a_refused_finish_counts_nothing(client) -> None:
    """A finish the guard refuses (the claim is someone else's) writes no count, like no row."""
    job = make_job("save", state=JobState.EXECUTING)
    with pytest.raises(LostClaim):
        transitions.complete_job(job.job_id, claim_id="not-mine", actor="w")
    assert not FinishedCount.objects.exists()
    transitions.complete_job(job.job_id, claim_id=job.claim_id, actor="w")
    assert list(FinishedCount.objects.values_list("scope", "state", "finished")) == [
        ("save", "SUCCEEDED", 1)
    ]


def test_a_rolled_back_finish_takes_its_count_with_it(client) -> None:
    job = make_job("save", state=JobState.EXECUTING)
    with pytest.raises(RuntimeError), transaction.atomic():
        transitions.complete_job(job.job_id, claim_id=job.claim_id, actor="w")
        assert FinishedCount.objects.get().finished == 1
        raise RuntimeError("the caller's transaction fails after the finish")
    assert not FinishedCount.objects.exists()
    assert Job.objects.get(job_id=job.job_id).state == JobState.EXECUTING


def test_one_process_adds_to_its_own_minute_row(client) -> None:
    """Each process has its own row per minute, scope and state: a second finish in the same
    minute adds to it; another process's (another shard) stays apart, and readers sum both."""
    now = transitions.db_now().replace(second=5, microsecond=0)
    for _ in range(3):
        make_job("save", state=JobState.SUCCEEDED, at=now)
    row = FinishedCount.objects.get()
    assert (row.finished, row.shard, row.minute) == (3, os.getpid(), now.replace(second=0))
    FinishedCount.objects.create(
        minute=row.minute, scope="save", state="SUCCEEDED", shard=row.shard + 1, finished=4
    )
    counts = dict(selectors.throughput_per_minute(now + dt.timedelta(seconds=30)).points)
    assert counts[now.strftime("%H:%M")] == 7


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


def test_the_migration_counts_the_last_hour_of_finished_jobs_from_the_job_table(client) -> None:
    """An upgraded console's chart does not start empty: 0010 counts the last hour once."""
    backfill = importlib.import_module("inbox.migrations.0010_finished_count").backfill_last_hour
    now = transitions.db_now()
    make_job("save", state=JobState.SUCCEEDED, at=now - dt.timedelta(minutes=5))
    make_job("save", state=JobState.FAILED, at=now - dt.timedelta(minutes=5))
    make_job("noop", state=JobState.SUCCEEDED, at=now - dt.timedelta(minutes=20))
    make_job("save", state=JobState.SUCCEEDED, at=now - dt.timedelta(hours=3))
    make_job("save", state=JobState.READY)
    FinishedCount.objects.all().delete()  # as before the upgrade

    backfill(django_apps, SimpleNamespace(connection=connection))

    five, twenty = (
        (now - dt.timedelta(minutes=m)).replace(second=0, microsecond=0) for m in (5, 20)
    )
    assert sorted(FinishedCount.objects.values_list("minute", "scope", "state", "finished")) == [
        (twenty, "noop", "SUCCEEDED", 1),
        (five, "save", "FAILED", 1),
        (five, "save", "SUCCEEDED", 1),
    ]
