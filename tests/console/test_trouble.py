"""Trouble shown as trouble: stuck runs (an effectively active run whose owner's heartbeat is
dead, or that has made no progress for too long) and orphaned jobs (CLAIMED or EXECUTING with a
running lease but a dead holder) are derived when read, flagged with their reason wherever they
are shown, and counted on the dashboard's tiles."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.urls import reverse

from core.errors import ConfigurationError
from inbox import selectors, transitions
from inbox.models import JobState, Worker, WorkerStatus
from inbox.workers import register_worker
from runs.consolidators import PlannedGroup, PlannedMember
from runs.models import Run, RunStatus
from runs.selectors import stuck_reasons, stuck_runs, with_owner_heartbeat
from runs.transitions import plan_run
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


class OneGroup:
    name = "one-group"

    def plan(self, *, store, carry_over):
        return [PlannedGroup("k", (PlannedMember("a.md"), PlannedMember("b.md")))]


def _run(store: str = "archive", owner: str = "owner-1", lease: int = 3600, at=None) -> Run:
    return plan_run(store=store, owner=owner, lease_seconds=lease, consolidator=OneGroup(), at=at)


def _heartbeat(worker_id: str, *, seen_ago: float = 0.0, status: str = WorkerStatus.RUNNING):
    register_worker(worker_id=worker_id, kind="consolidator", store="archive", lease_seconds=60)
    seen = transitions.db_now() - dt.timedelta(seconds=seen_ago)
    Worker.objects.filter(worker_id=worker_id).update(last_seen_at=seen, status=status)


# --- stuck runs ---------------------------------------------------------------------------------


def test_stuck_run_owner_heartbeat_dead_says_since_when():
    run = _run(owner="owner-dead")
    _heartbeat("owner-dead", seen_ago=600)  # dead after 3 × 1 s + 60 s
    now = transitions.db_now()
    stuck = stuck_reasons([run], now)[run.run_id]
    assert stuck.kind == "owner_dead"
    worker = Worker.objects.get(worker_id="owner-dead")
    assert stuck.since == worker.last_seen_at + worker.dead_after()


def test_stuck_run_owner_without_heartbeat_row_is_stuck():
    run = _run(owner="never-seen")
    assert stuck_reasons([run], transitions.db_now())[run.run_id].kind == "owner_dead"


def test_stuck_run_owner_stopped_is_stuck_since_it_stopped():
    run = _run(owner="owner-stopped")
    _heartbeat("owner-stopped", seen_ago=5, status=WorkerStatus.STOPPED)
    stuck = stuck_reasons([run], transitions.db_now())[run.run_id]
    assert stuck.kind == "owner_dead"
    assert "stopped" in stuck.reason


def test_stuck_run_alive_owner_with_recent_progress_is_not_stuck():
    run = _run(owner="owner-alive")
    _heartbeat("owner-alive")
    assert stuck_reasons([run], transitions.db_now()) == {}


def test_stuck_run_alive_owner_without_progress_past_the_threshold_is_stuck(settings):
    settings.RUNS_STUCK_AFTER_SECONDS = 120
    now = transitions.db_now()
    run = _run(owner="owner-slow", at=now - dt.timedelta(seconds=200))
    _heartbeat("owner-slow")
    stuck = stuck_reasons([run], now)[run.run_id]
    assert (stuck.kind, round(stuck.for_seconds)) == ("no_progress", 200)
    settings.RUNS_STUCK_AFTER_SECONDS = 300
    assert stuck_reasons([run], now) == {}


def test_stuck_run_whose_lease_lapsed_is_expired_not_stuck():
    now = transitions.db_now()
    run = _run(owner="gone", lease=60, at=now - dt.timedelta(seconds=120))
    assert stuck_reasons([run], now) == {}


@pytest.mark.parametrize("value", [0, -5, "300", True, 1.5])
def test_stuck_threshold_setting_not_a_positive_integer_is_refused(settings, value):
    settings.RUNS_STUCK_AFTER_SECONDS = value
    run = _run()
    with pytest.raises(ConfigurationError, match="RUNS_STUCK_AFTER_SECONDS"):
        stuck_reasons([run], transitions.db_now())


def test_stuck_reasons_of_runs_read_with_their_owner_take_no_query(django_assert_num_queries):
    for i in range(3):
        _run(store=f"s{i}", owner=f"o{i}")
    _heartbeat("o1")
    runs = with_owner_heartbeat(Run.objects.filter(status=RunStatus.ACTIVE))
    now = transitions.db_now()
    with django_assert_num_queries(0):
        reasons = stuck_reasons(runs, now)
    assert sorted(run.store for run in runs if run.run_id in reasons) == ["s0", "s2"]


def test_runs_page_flags_the_stuck_run_in_red_with_reason_and_close_button(client):
    login(client, "ops", "operator")
    _run(owner="owner-dead")
    _heartbeat("owner-dead", seen_ago=600)
    html = client.get(reverse("console:runs")).content.decode()
    assert '<span class="run-status run-stuck">stuck</span>' in html
    assert re.search(r'class="stuck-reason">owner dead since \d\d:\d\d:\d\d UTC<', html)
    assert "Close stuck run</button>" in html


def test_runs_page_healthy_run_is_not_flagged(client):
    login(client, "ops", "operator")
    _run(owner="owner-alive")
    _heartbeat("owner-alive")
    html = client.get(reverse("console:runs")).content.decode()
    assert "run-stuck" not in html
    assert "Close run</button>" in html


def test_dashboard_counts_stuck_runs_and_lists_them_with_a_close_button(client):
    login(client, "ops", "operator")
    _run(store="archive", owner="never-seen")
    _run(store="notes", owner="owner-alive")
    _heartbeat("owner-alive")
    assert [run.store for run, _stuck in stuck_runs()] == ["archive"]
    alerts = client.get(reverse("console:home"), headers=hx("dashboard-alerts")).content.decode()
    tile = re.search(r'<a class="tile alert" href="/runs/"><span class="n">(\d+)</span>', alerts)
    assert tile and tile.group(1) == "1"
    runs = client.get(reverse("console:home"), headers=hx("dashboard-runs")).content.decode()
    assert runs.count("run-stuck") == 1
    assert "owner has no heartbeat" in runs
    assert 'hx-target="#dashboard-runs"' in runs


def test_close_from_the_dashboard_answers_with_the_dashboard_region(client):
    login(client, "ops", "operator")
    run = _run(owner="never-seen")
    response = client.post(
        reverse("console:close_run", args=[run.run_id]),
        {"request_id": uuid.uuid4().hex, "reason": "owner host is gone"},
        headers=hx("dashboard-runs"),
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.strip().startswith('<section id="dashboard-runs"')
    assert "closed as abandoned" in body
    run.refresh_from_db()
    assert (run.status, run.closed_by) == (RunStatus.ABANDONED, "ops")


# --- orphaned jobs ------------------------------------------------------------------------------


def _executor(worker_id: str, *, seen_ago: float = 0.0) -> None:
    register_worker(worker_id=worker_id, kind="executor", scope="save", lease_seconds=10)
    seen = transitions.db_now() - dt.timedelta(seconds=seen_ago)
    Worker.objects.filter(worker_id=worker_id).update(last_seen_at=seen)


def test_orphaned_job_holder_dead_lease_running_says_what_the_sweep_will_do():
    save = make_job("save", JobState.CLAIMED, worker_id="w-dead", lease_seconds=300)
    delete = make_job("delete", JobState.EXECUTING, worker_id="w-dead", lease_seconds=300)
    _executor("w-dead", seen_ago=120)
    now = transitions.db_now()
    orphans = selectors.orphaned([save, delete], now)
    assert orphans[save.job_id].sweep_to == JobState.READY
    assert orphans[delete.job_id].sweep_to == JobState.OUTCOME_UNKNOWN
    assert 290 <= orphans[save.job_id].lapses_in <= 300
    assert orphans[save.job_id].dead_since is not None


def test_orphaned_job_alive_holder_or_lapsed_lease_is_not_orphaned():
    alive = make_job("save", JobState.CLAIMED, worker_id="w-alive", lease_seconds=300)
    _executor("w-alive")
    now = transitions.db_now()
    lapsed = make_job("save", JobState.CLAIMED, at=now - dt.timedelta(seconds=300))
    assert selectors.orphaned([alive, lapsed], now) == {}


def test_orphaned_filter_dashboard_tile_and_job_page_agree(client):
    login(client, "look", "viewer")
    orphan = make_job("save", JobState.CLAIMED, worker_id="w-dead", lease_seconds=300)
    _executor("w-dead", seen_ago=120)
    healthy = make_job("save", JobState.CLAIMED, worker_id="w-alive", lease_seconds=300)
    _executor("w-alive")
    listing = client.get(
        reverse("console:job_list"), {"lease": "orphaned"}, headers=hx("job-table")
    ).content.decode()
    assert orphan.job_id in listing and healthy.job_id not in listing
    assert ">orphaned</span>" in listing
    alerts = selectors.dashboard_alerts(transitions.db_now())
    assert alerts.orphaned == 1
    tiles = client.get(reverse("console:home"), headers=hx("dashboard-alerts")).content.decode()
    assert 'href="/jobs/?lease=orphaned"><span class="n">1</span>' in tiles
    page = client.get(reverse("console:job_detail", args=[orphan.job_id])).content.decode()
    assert "<strong>Orphaned.</strong> holder w-dead dead since" in page
    assert "the sweep will offer it again (READY)" in page
    assert (
        "Orphaned"
        not in client.get(reverse("console:job_detail", args=[healthy.job_id])).content.decode()
    )
